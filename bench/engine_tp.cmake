# bench/engine_tp.cmake - the tensor-parallel step benchmark (issue 9): compute / exposed TP
# communication / rest, bytes per step against the formula, activation memory per worker.
add_executable(bench_tp ${CMAKE_CURRENT_SOURCE_DIR}/bench_tp.c)
target_link_libraries(bench_tp PRIVATE ct_engine m)
