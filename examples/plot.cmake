# examples/plot.cmake - ct_plot, pictures of a run as SVG (examples/plot/: metrics JSON Lines,
# Chrome traces and bench CSVs read by hand; only the C library and libm, no device, no MPI).
add_executable(ct_plot
  ${CMAKE_CURRENT_SOURCE_DIR}/plot/ct_plot.c ${CMAKE_CURRENT_SOURCE_DIR}/plot/loss.c
  ${CMAKE_CURRENT_SOURCE_DIR}/plot/timeline.c ${CMAKE_CURRENT_SOURCE_DIR}/plot/bench.c
  ${CMAKE_CURRENT_SOURCE_DIR}/plot/json.c ${CMAKE_CURRENT_SOURCE_DIR}/plot/svg.c
  ${CMAKE_CURRENT_SOURCE_DIR}/plot/points.c ${CMAKE_CURRENT_SOURCE_DIR}/plot/names.c)
target_link_libraries(ct_plot PRIVATE m)
