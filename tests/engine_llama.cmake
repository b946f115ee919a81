# tests/engine_llama.cmake - the Llama model (issue 29): against PyTorch, its layouts, its files.
if(TARGET ct_engine)
  ct_add_test(NAME test_engine_llama_torch SOURCES test_engine_llama_torch.c LIBS ct_engine m
              LABELS opencl)
  target_compile_definitions(test_engine_llama_torch PRIVATE CT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()
if(TARGET train_gpt)
  foreach(part dp pp tp tpck moe every bf16 files refuse)
    add_test(NAME test_engine_llama_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_llama.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_llama_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
# Hugging Face Llama directories, host only: round trips and every refusal named.
ct_add_test(NAME test_engine_io_hf_llama SOURCES test_engine_io_hf_llama.c ${CT_ENGINE_HOST_SRC}
            LIBS ct_cl m LABELS unit)
target_include_directories(test_engine_io_hf_llama PRIVATE ${CT_ENGINE_INC}
                           ${CMAKE_SOURCE_DIR}/parallel)
# The Llama ops with bf16 storage against the double reference on bf16-rounded inputs (tolerances
# derived in the file) and their storage refusals.
ct_add_test(NAME test_engine_llama_ops_bf16 SOURCES test_engine_llama_ops_bf16.c LIBS ct_test_ref
            LABELS opencl)
