# tests/engine_layout.cmake - every axis at once and the layout planner (issue 12).
# test_engine_layout.sh: three-axis layouts at W = 8 (2 ranks x 4 PoCL devices, and 8 ranks)
# against the single device, resume across them, and (with ct_plan built) the planner's memory
# prediction against each run's memory report; registered per part so each stays short.
if(TARGET train_gpt)
  set(CT_LAYOUT_PLAN "")
  if(TARGET ct_plan)
    set(CT_LAYOUT_PLAN $<TARGET_FILE:ct_plan>)
  endif()
  foreach(part mixed moe every ranks resume)
    add_test(NAME test_engine_layout_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_layout.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part} ${CT_LAYOUT_PLAN})
    set_tests_properties(test_engine_layout_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
# test_engine_plan: the planner's pure half (enumeration against the rules, the time model
# against step times worked by hand, links tables); no device.
if(TARGET ct_engine)
  ct_add_test(NAME test_engine_plan SOURCES test_engine_plan.c LIBS ct_engine LABELS unit)
endif()
# test_ct_plan.sh: ct_plan measured on 2 workers (ranks, threads), --json, links tables;
# train_gpt --layout auto against the single device; nothing fits; bad input.
if(TARGET ct_plan AND TARGET train_gpt)
  foreach(part rules measured)
    set(name test_ct_plan)
    if(part STREQUAL "measured")
      set(name test_ct_plan_measured)
    endif()
    add_test(NAME ${name}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_ct_plan.sh $<TARGET_FILE:ct_plan>
                     $<TARGET_FILE:train_gpt> ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(${name} PROPERTIES LABELS "mpi;opencl" ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
