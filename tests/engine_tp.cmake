# tests/engine_tp.cmake - tensor parallelism (issue 9).
# test_engine_tp: the TP pieces (column/row-parallel linear, head-split attention, vocabulary-
# parallel embedding and cross-entropy, SP gathers/scatters) and the whole model at tp = N
# against the single-device ops, N = 2 as threads and as ranks, 3 as threads, 4 mixed; threads
# sharing one device (device-resident collectives).
if(TARGET ct_engine)
  add_executable(test_engine_tp test_engine_tp.c)
  target_include_directories(test_engine_tp PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_engine_tp PRIVATE ct_engine m)
  # "shared": the threads share one device and its context, so TP's collectives run on the
  # device (2x2shared: the group spans two processes, so staged through the host, and asking
  # for device collectives is refused)
  foreach(shape "1x2;1;2;pthread pthread" "1x2rows;1;2;pthread pthread;rows" "2x1;2;1;pthread" "1x3;1;3;pthread pthread pthread"
                "2x2;2;2;pthread pthread" "1x2shared;1;2;pthread;shared"
                "1x3shared;1;3;pthread;shared" "2x2shared;2;2;pthread;shared")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    list(GET shape 3 pd)
    list(LENGTH shape len)
    set(mode "")
    if(len GREATER 4)
      list(GET shape 4 mode)
    endif()
    add_test(NAME test_engine_tp_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_engine_tp> ${nt}
              ${mode})
    set_tests_properties(test_engine_tp_${nm} PROPERTIES LABELS "mpi;opencl"
      ENVIRONMENT "OMP_WAIT_POLICY=passive;POCL_DEVICES=${pd}")
  endforeach()
endif()
# test_engine_tp.sh: layouts through train_gpt against the single device (tp 2 and 4 as threads,
# ranks and mixed, SP on and off, dp 2 x tp 2 with ZeRO 1-3), memory records, resume across
# layouts, refusals.
if(TARGET train_gpt)
  foreach(part threads ranks mixed sp resume refuse)
    add_test(NAME test_engine_tp_layout_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_tp.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_tp_layout_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
