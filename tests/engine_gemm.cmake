# tests/engine_gemm.cmake - the model's GEMM paths (issue 28) through train_gpt: the refusals
# of --gemm and --tf32 ("refuse"), auto's record and --gemm portable bitwise ("auto"), the mma
# kernel's stand-ins training ("emulated"), fp32 with --tf32 1 on the tf32 kernel's stand-ins
# ("tf32"). The selection itself: test_engine_gemm_select; the kernels: test_cl_gemm_bf16 and
# test_cl_gemm_tf32.
if(TARGET train_gpt)
  foreach(part refuse auto emulated tf32)
    add_test(NAME test_engine_gemm_plan_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_gemm_plan.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_gemm_plan_${part} PROPERTIES LABELS "opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
