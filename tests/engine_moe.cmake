# tests/engine_moe.cmake - mixture of experts and expert parallelism (issue 11).
# test_engine_moe: the routing ops (softmax + top-k, capacity) and the MoE layer forward and
# backward against the double reference, on one worker and over an EP group of N workers (each its
# own rows and E / N experts), and with N > 1 over a TP group of N workers (every expert split
# over it, the partial outputs and input gradients summed): 1 worker, 2 threads, 2 ranks, 2 x 2.
if(TARGET ct_engine)
  add_executable(test_engine_moe test_engine_moe.c)
  target_include_directories(test_engine_moe PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_engine_moe PRIVATE ct_test_ref)
  foreach(shape "1x1;1;1;pthread" "1x2;1;2;pthread pthread" "2x1;2;1;pthread"
                "2x2;2;2;pthread pthread")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    list(GET shape 3 pd)
    add_test(NAME test_engine_moe_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_engine_moe> ${nt})
    set_tests_properties(test_engine_moe_${nm} PROPERTIES LABELS "mpi;opencl"
      ENVIRONMENT "OMP_WAIT_POLICY=passive;POCL_DEVICES=${pd}")
  endforeach()
endif()
# test_engine_moe.sh: MoE layouts through train_gpt against the single device (ep 2 and 4, ep 2
# inside dp 4, ZeRO 0 and 1; threads, ranks, mixed; pipelines), memory records, resume across
# layouts, safetensors files (round trips, Python's reader, damaged files), refusals,
# recomputation (attention, block) bitwise the losses of none with MoE blocks, experts under
# tensor parallelism (tp 2, SP, tp 2 x dp 2 (ep 2); resume); ZeRO 2 and 3 with experts.
if(TARGET train_gpt)
  foreach(part threads ranks mixed ep resume files refuse recompute tp zero23)
    add_test(NAME test_engine_moe_layout_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_moe.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_moe_layout_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
