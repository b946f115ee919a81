# tests/engine_pp.cmake - pipeline parallelism (issue 10): the model's split backward (zero-bubble
# halves) against the whole one; every schedule and layout through train_gpt against the single
# device (tests/test_engine_pp.sh, registered per part so each stays short).
if(TARGET ct_engine)
  ct_add_test(NAME test_engine_split SOURCES test_engine_split.c LIBS ct_engine LABELS opencl)
endif()
if(TARGET train_gpt)
  foreach(part threads ranks mixed zb1 repeats)
    add_test(NAME test_engine_pp_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_pp.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_pp_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
if(TARGET ct_pipeline)
  add_test(NAME test_ct_pipeline
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_ct_pipeline.sh $<TARGET_FILE:ct_pipeline>)
  set_tests_properties(test_ct_pipeline PROPERTIES LABELS "unit")
endif()
