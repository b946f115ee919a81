# bench/engine_pp.cmake - the pipeline bubble benchmark (issue 10): measured from the executed
# timeline beside the simulator fed the measured costs, over stages x micro-batches x schedules.
add_executable(bench_pipeline ${CMAKE_CURRENT_SOURCE_DIR}/bench_pipeline.c)
target_link_libraries(bench_pipeline PRIVATE ct_engine m OpenMP::OpenMP_C MPI::MPI_C)
