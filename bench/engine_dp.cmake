# bench/engine_dp.cmake - the data-parallel step benchmark (issue 5): compute / exposed
# communication / optimizer per step for one layout (run under mpiexec, --devices-per-rank).
add_executable(bench_dp ${CMAKE_CURRENT_SOURCE_DIR}/bench_dp.c)
target_link_libraries(bench_dp PRIVATE ct_engine m)
