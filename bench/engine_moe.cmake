# bench/engine_moe.cmake - one MoE layer under expert parallelism (issue 11): dispatch + combine
# (all-to-all-v with host staging, the device's gather and combine) against the experts' compute,
# at a balanced and a skewed load.
add_executable(bench_moe ${CMAKE_CURRENT_SOURCE_DIR}/bench_moe.c)
target_link_libraries(bench_moe PRIVATE ct_engine m)
