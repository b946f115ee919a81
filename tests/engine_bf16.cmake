# tests/engine_bf16.cmake - training in bf16 (issue 27) through train_gpt: the
# tiny GPT's 300 steps against fp32's ("converge"), the memory records (activations <= 0.55x
# fp32's, predicted == allocated) and recompute block bitwise ("memory"), dp 2 (threads ZeRO-1,
# ranks ZeRO-2) against the single-device bf16 run ("dp"), the layouts not built yet
# refused ("refuse"), the fused attention's mma variant (emulated) against the scalar fused
# kernel over 10 steps ("mma"). The ops in bf16: test_engine_ops_bf16 (engine_ops.cmake).
if(TARGET train_gpt)
  foreach(part converge memory dp refuse mma)
    add_test(NAME test_engine_bf16_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_bf16.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_bf16_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
