# examples/parallel.cmake - ct_pipeline, the pipeline schedule viewer (pure: parallel/'s schedule
# generators and simulator; no device, no MPI start).
if(TARGET ct_parallel)
  add_executable(ct_pipeline ${CMAKE_CURRENT_SOURCE_DIR}/ct_pipeline.c)
  target_link_libraries(ct_pipeline PRIVATE ct_parallel m)
endif()
