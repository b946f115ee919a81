# tests/engine_pp.cmake - pipeline parallelism (issue 10): the model's split backward (zero-bubble
# halves) against the whole one; every schedule and layout through train_gpt against the single
# device (tests/test_engine_pp.sh, registered per part so each stays short).
if(TARGET ct_engine)
  ct_add_test(NAME test_engine_split SOURCES test_engine_split.c LIBS ct_engine LABELS opencl
              TIMEOUT 300)
endif()
