# examples/plan.cmake - ct_plan, the layout planner (engine/plan/): the layouts a
# model can train with on W workers, ranked by predicted step time among those that fit memory.
if(TARGET ct_engine)
  add_executable(ct_plan ${CMAKE_CURRENT_SOURCE_DIR}/ct_plan.c)
  target_link_libraries(ct_plan PRIVATE ct_engine m)
endif()
