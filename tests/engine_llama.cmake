# tests/engine_llama.cmake - the Llama model (issue 29): against PyTorch, its layouts, its files.
if(TARGET ct_engine)
  ct_add_test(NAME test_engine_llama_torch SOURCES test_engine_llama_torch.c LIBS ct_engine m
              LABELS opencl)
  target_compile_definitions(test_engine_llama_torch PRIVATE CT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()
