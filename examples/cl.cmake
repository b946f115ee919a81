# Programs of the device layer.
add_executable(ct_devices ${CMAKE_CURRENT_SOURCE_DIR}/ct_devices.c)
target_link_libraries(ct_devices PRIVATE ct_cl)
add_executable(ct_tune ${CMAKE_CURRENT_SOURCE_DIR}/ct_tune.c ${CMAKE_SOURCE_DIR}/bench/gemm_shapes.c)
target_include_directories(ct_tune PRIVATE ${CMAKE_SOURCE_DIR}/bench)
target_link_libraries(ct_tune PRIVATE ct_cl m)
