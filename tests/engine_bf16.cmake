# tests/engine_bf16.cmake - training in bf16 (issue 27) through train_gpt: the
# tiny GPT's 300 steps against fp32's ("converge"), the memory records (activations <= 0.55x
# fp32's, predicted == allocated) and recompute block and attention bitwise ("memory"), dp 2 (threads ZeRO-1,
# ranks ZeRO-2) and tp 2 (threads, ranks with SP, device-resident, mixed; its bytes half of
# fp32's), pp 2 with every schedule ("pp"), experts with ep 2 ("ep"), ranks x threads ("mixed_pp", "mixed_ep"), --grad-reduce bf16 ("grad_reduce"), a bitwise resume with either
# --bf16-round ("resume"), ct_plan's bf16 bytes ("plan"), their bytes
# half too, against the single-device bf16 run, dp 2 ZeRO-3 (threads, ranks: "zero3"), the
# refusals ("refuse"), the fused attention's mma variant (emulated) against the scalar fused
# kernel over 10 steps ("mma"). The ops in bf16: test_engine_ops_bf16 (engine_ops.cmake).
if(TARGET train_gpt)
  foreach(part converge memory dp zero3 tp pp pp_zb ep mixed_pp mixed_ep grad_reduce grad_reduce_odd
               resume plan refuse mma)
    add_test(NAME test_engine_bf16_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_bf16.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_bf16_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
