# bench/parallel.cmake - bench_allreduce: nccl-tests-style benchmark of the collectives (mpiexec).
if(TARGET ct_parallel)
  add_executable(bench_allreduce ${CMAKE_CURRENT_SOURCE_DIR}/bench_allreduce.c)
  target_link_libraries(bench_allreduce PRIVATE ct_parallel m)
endif()
