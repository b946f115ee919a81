# tests/engine_faults.cmake - hardening (issue 13): allocation fault injection through the one
# allocator hook of cl/ (every allocation of building a worker fails once, in turn; leaks are
# checked by AddressSanitizer in the -DCT_SANITIZE=ON build).
if(TARGET ct_engine)
  add_executable(test_engine_alloc_faults test_engine_alloc_faults.c)
  target_include_directories(test_engine_alloc_faults PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_engine_alloc_faults PRIVATE ct_engine m)
  foreach(nr 1 2)
    add_test(NAME test_engine_alloc_faults_${nr}x1
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_engine_alloc_faults>)
    set_tests_properties(test_engine_alloc_faults_${nr}x1 PROPERTIES LABELS "mpi;opencl" TIMEOUT 600
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
