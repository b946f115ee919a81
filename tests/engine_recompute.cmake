# tests/engine_recompute.cmake - activation recomputation and the memory model (issue 14):
# --recompute attention and block bitwise against none on one device (both attention paths),
# dp 2 (threads ZeRO-1, ranks ZeRO-3), tp 2 with SP, pp 2 (1F1B, zb1); every worker's memory
# record predicted == allocated; refusals. (test_engine_mem, in engine_ops.cmake, checks the
# memory model against the device's accounting through the library.)
if(TARGET train_gpt)
  foreach(part single dp tp pp refuse)
    add_test(NAME test_engine_recompute_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_recompute.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_recompute_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()

# The head and its loss in chunks of rows (--loss-chunk): against the head in one piece, on one
# device, tp 2, tp 2 with sequence parallelism; refusals; 49152 tokens with GPT-2's vocabulary
# on one worker (slow).
if(TARGET train_gpt)
  foreach(part same sp refuse big)
    add_test(NAME test_engine_loss_chunk_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_loss_chunk.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_loss_chunk_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
