# bench/engine.cmake - the training-step benchmark of the engine (owner: ops/model).
add_executable(bench_train ${CMAKE_CURRENT_SOURCE_DIR}/bench_train.c)
target_link_libraries(bench_train PRIVATE ct_engine m)
add_executable(bench_attention ${CMAKE_CURRENT_SOURCE_DIR}/bench_attention.c)
target_link_libraries(bench_attention PRIVATE ct_engine m)
add_executable(bench_plan ${CMAKE_CURRENT_SOURCE_DIR}/bench_plan.c)
target_link_libraries(bench_plan PRIVATE ct_engine m)
