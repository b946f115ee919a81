# tests/engine_dp.cmake - data parallelism and ZeRO through train_gpt (issue 5): threads, ranks
# and mixed layouts against the single-device losses, memory records, resume under another
# layout, refused layouts. One script, registered per part so each stays short.
if(TARGET train_gpt)
  foreach(part threads axes ranks mixed zero3 resume refuse)
    add_test(NAME test_engine_dp_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_dp.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_dp_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
# The executor through the library: DP with ZeRO 0-3 against the single device, as threads,
# ranks and mixed (two PoCL devices per process).
if(TARGET ct_engine)
  add_executable(test_engine_step test_engine_step.c)
  target_include_directories(test_engine_step PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_engine_step PRIVATE ct_engine m)
  foreach(shape "1x1;1;1" "1x2;1;2" "2x1;2;1" "2x2;2;2")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME test_engine_step_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_engine_step> ${nt})
    set_tests_properties(test_engine_step_${nm} PROPERTIES LABELS "mpi;opencl"
      ENVIRONMENT "OMP_WAIT_POLICY=passive;POCL_DEVICES=pthread pthread")
  endforeach()
endif()
# --trace on every layout kind.
if(TARGET train_gpt)
  add_test(NAME test_engine_trace
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_trace.sh $<TARGET_FILE:train_gpt>
                   ${MPIEXEC_EXECUTABLE})
  set_tests_properties(test_engine_trace PROPERTIES LABELS "mpi;opencl"
                       ENVIRONMENT "OMP_WAIT_POLICY=passive")
endif()
# ZeRO's traffic: the per-step byte counters against the formulas at dp 2 (threads) and dp 4
# (2 ranks x 2 threads), ZeRO 0-3, one and two micro-steps.
if(TARGET ct_engine)
  add_executable(test_engine_zero_bytes test_engine_zero_bytes.c)
  target_include_directories(test_engine_zero_bytes PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_engine_zero_bytes PRIVATE ct_engine m)
  foreach(shape "1x2;1;2" "2x2;2;2")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME test_engine_zero_bytes_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_engine_zero_bytes> ${nt})
    set_tests_properties(test_engine_zero_bytes_${nm} PROPERTIES LABELS "mpi;opencl"
      ENVIRONMENT "OMP_WAIT_POLICY=passive;POCL_DEVICES=pthread pthread")
  endforeach()
endif()
# ZeRO-2 and 3 with the interleaved and zb1 schedules at dp 2 x pp 2 against the single device.
if(TARGET train_gpt)
  foreach(part threads ranks)
    add_test(NAME test_engine_zero_sched_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_zero_sched.sh
                     $<TARGET_FILE:train_gpt> ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_zero_sched_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
