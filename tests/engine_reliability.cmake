# tests/engine_reliability.cmake - hardening (issue 13; docs/RELIABILITY.md): allocation fault
# injection through the one allocator hook of cl/ (every allocation of building a worker fails
# once, in turn; leaks are checked by AddressSanitizer in the -DCT_SANITIZE=ON build); skipped
# non-finite steps through the library (1 device, dp 2 threads, dp 2 ranks).
if(TARGET ct_engine)
  add_executable(test_engine_alloc_faults test_engine_alloc_faults.c)
  target_include_directories(test_engine_alloc_faults PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_engine_alloc_faults PRIVATE ct_engine m)
  foreach(nr 1 2)
    add_test(NAME test_engine_alloc_faults_${nr}x1
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_engine_alloc_faults>)
    set_tests_properties(test_engine_alloc_faults_${nr}x1 PROPERTIES LABELS "mpi;opencl"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
if(TARGET ct_engine)
  add_executable(test_engine_nonfinite test_engine_nonfinite.c)
  target_include_directories(test_engine_nonfinite PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_engine_nonfinite PRIVATE ct_engine m)
  foreach(shape "1x1;1;1" "1x2;1;2" "2x1;2;1")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME test_engine_nonfinite_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_engine_nonfinite> ${nt})
    set_tests_properties(test_engine_nonfinite_${nm} PROPERTIES LABELS "mpi;opencl"
      ENVIRONMENT "OMP_WAIT_POLICY=passive;POCL_DEVICES=pthread pthread")
  endforeach()
endif()
# train_gpt when things go wrong: non-finite steps (1 device, dp 2 threads, dp 2 ranks),
# checkpoint directory hygiene, one worker's error ending every worker within 10 s.
if(TARGET train_gpt)
  foreach(part nonfinite checkpoints failures)
    add_test(NAME test_engine_reliability_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_reliability.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_reliability_${part} PROPERTIES LABELS "mpi;opencl")
  endforeach()
endif()
# test_programs_cli.sh: every program's command line before any work (--help exits 0; an unknown
# flag, a missing value, a value that is not a number: status 2 naming the flag).
if(TARGET train_gpt AND TARGET sample_gpt AND TARGET ct_plan AND TARGET ct_pipeline AND TARGET ct_tune
   AND TARGET bench_train AND TARGET bench_gemm AND TARGET bench_plan AND TARGET bench_tp
   AND TARGET bench_dp AND TARGET bench_moe AND TARGET bench_pipeline AND TARGET bench_attention
   AND TARGET bench_allreduce AND TARGET bench_clblast_lock AND TARGET ct_plot)
  add_test(NAME test_programs_cli
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_programs_cli.sh ${CMAKE_BINARY_DIR}/bin)
  set_tests_properties(test_programs_cli PROPERTIES LABELS "mpi;opencl")
endif()
# Sharded checkpoints (issue 30): resumed bitwise on the writing layout and within 1e-5 on
# others, --save-async writing the same files, a writer killed mid-save (at a moment seen, and at
# two chosen points: CT_TEST_SAVE_KILL), a host allocation
# failing at each point of a step and its save (tests/test_engine_reliability_shards.sh).
if(TARGET train_gpt)
  foreach(part resume async kill killat oom)
    add_test(NAME test_engine_reliability_shards_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_reliability_shards.sh
                     $<TARGET_FILE:train_gpt> ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_reliability_shards_${part} PROPERTIES LABELS "mpi;opencl")
  endforeach()
endif()
