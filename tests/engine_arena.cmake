# tests/engine_arena.cmake - the activation arena in several device buffers (a limit on the
# largest single allocation): each layout bitwise the same as in one buffer, memory predicted ==
# allocated; refusals (a tensor above the limit, the parameters above it, a bad flag).
if(TARGET train_gpt)
  foreach(part layouts refuse)
    add_test(NAME test_engine_arena_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_arena.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_arena_${part} PROPERTIES LABELS "mpi;opencl" TIMEOUT 600
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
