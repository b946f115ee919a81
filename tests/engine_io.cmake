# tests/engine_io.cmake - the engine's I/O, data loader and training plumbing (owner: I/O).
# The host-only tests compile the I/O sources directly (with ct_cl for ct_status), so they build
# and run even while the rest of the engine is being changed.
set(CT_IO_HOST_SRC ${CT_ENGINE_HOST_SRC})

ct_add_test(NAME test_engine_io SOURCES test_engine_io.c ${CT_IO_HOST_SRC}
            LIBS ct_cl m LABELS unit)
target_include_directories(test_engine_io PRIVATE ${CT_ENGINE_INC} ${CMAKE_SOURCE_DIR}/parallel)
ct_add_test(NAME test_engine_io_train SOURCES test_engine_io_train.c ${CT_IO_HOST_SRC}
            LIBS ct_cl m LABELS unit)
target_include_directories(test_engine_io_train PRIVATE ${CT_ENGINE_INC} ${CMAKE_SOURCE_DIR}/parallel)

# Tests that need the model and a device.
if(TARGET ct_engine)
  ct_add_test(NAME test_engine_torch SOURCES test_engine_torch.c LIBS ct_engine m
              LABELS opencl)
  target_compile_definitions(test_engine_torch PRIVATE CT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()
if(TARGET train_gpt AND TARGET sample_gpt)
  add_test(NAME test_train_cli
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_train_cli.sh $<TARGET_FILE:train_gpt>
                   $<TARGET_FILE:sample_gpt>)
  set_tests_properties(test_train_cli PROPERTIES LABELS opencl)
endif()
# bf16 model files and Hugging Face GPT-2 directories, host only (references written in the test).
ct_add_test(NAME test_engine_io_hf SOURCES test_engine_io_hf.c ${CT_IO_HOST_SRC}
            LIBS ct_cl m LABELS unit)
target_include_directories(test_engine_io_hf PRIVATE ${CT_ENGINE_INC} ${CMAKE_SOURCE_DIR}/parallel)
if(TARGET train_gpt)
  add_test(NAME test_train_files
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_train_files.sh $<TARGET_FILE:train_gpt>)
  set_tests_properties(test_train_files PROPERTIES LABELS opencl)
endif()
ct_add_test(NAME test_engine_io_shards SOURCES test_engine_io_shards.c ${CT_IO_HOST_SRC}
            LIBS ct_cl m LABELS unit)
target_include_directories(test_engine_io_shards PRIVATE ${CT_ENGINE_INC} ${CMAKE_SOURCE_DIR}/parallel)
