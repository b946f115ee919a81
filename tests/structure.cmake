# tests/structure.cmake - the rules between the engine's files (cycles, sizes, no argv), checked on
# the built libraries (tests/test_structure.sh).
if(TARGET ct_engine)
  add_test(NAME test_structure
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_structure.sh ${CMAKE_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR})
  set_tests_properties(test_structure PROPERTIES LABELS unit)
endif()
