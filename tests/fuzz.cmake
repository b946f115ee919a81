# tests/fuzz.cmake - every fuzz target's corpus replayed in the normal build (label unit): the
# seeds of fuzz/corpus/<target> and the inputs of fuzz/regress/<target> (each a bug the campaign
# found, fixed). fuzz/replay.c is a plain main() over files, so this needs no clang; the long
# campaign (libFuzzer, ASan + UBSan) is scripts/fuzz, built by fuzz/CMakeLists.txt (CT_FUZZ).
include(${CMAKE_SOURCE_DIR}/fuzz/targets.cmake)

if(NOT CT_FUZZ)
  foreach(t IN LISTS CT_FUZZ_TARGETS)
    ct_fuzz_sources(${t} srcs libs)
    add_executable(fuzz_replay_${t} ${srcs} ${CT_FUZZ_DIR}/replay.c)
    target_include_directories(fuzz_replay_${t} PRIVATE ${CT_FUZZ_DIR} ${CT_ENGINE_INC}
                               ${CMAKE_SOURCE_DIR}/parallel)
    target_link_libraries(fuzz_replay_${t} PRIVATE ${libs})
    set(dirs ${CT_FUZZ_DIR}/corpus/${t})
    if(EXISTS ${CT_FUZZ_DIR}/regress/${t})
      list(APPEND dirs ${CT_FUZZ_DIR}/regress/${t})
    endif()
    add_test(NAME fuzz_replay_${t} COMMAND fuzz_replay_${t} ${dirs})
    set_tests_properties(fuzz_replay_${t} PROPERTIES LABELS unit)
  endforeach()
  add_executable(fuzz_gen_seeds ${CT_FUZZ_DIR}/gen_seeds.c ${CT_FUZZ_IO_SRC})
  target_include_directories(fuzz_gen_seeds PRIVATE ${CT_ENGINE_INC}
                             ${CMAKE_SOURCE_DIR}/parallel)
  target_link_libraries(fuzz_gen_seeds PRIVATE ct_cl m)
endif()
