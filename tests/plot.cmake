# tests/plot.cmake - ct_plot (examples/plot/), the pictures of a run: every mode on hand-written
# files in train_gpt's and bench_allreduce's formats, the refusals, outside bytes (unit; no
# device); and on a tiny real run's metrics and a pipeline run's trace (opencl).
if(TARGET ct_plot)
  add_test(NAME test_ct_plot COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_ct_plot.sh $<TARGET_FILE:ct_plot>)
  set_tests_properties(test_ct_plot PROPERTIES LABELS "unit")
  if(TARGET train_gpt)
    add_test(NAME test_ct_plot_run
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_ct_plot.sh $<TARGET_FILE:ct_plot>
                     $<TARGET_FILE:train_gpt> run)
    set_tests_properties(test_ct_plot_run PROPERTIES LABELS "opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endif()
endif()
