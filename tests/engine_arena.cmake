# tests/engine_arena.cmake - the activation arena and the model state in several device buffers
# (a limit on the largest single allocation): each layout the same as in one buffer (bitwise, or
# within 1e-6 where the gradient norm is summed per piece), memory predicted == allocated;
# refusals (a tensor or a parameter slice above the limit, a bad flag).
if(TARGET train_gpt)
  foreach(part layouts sweep refuse state)
    add_test(NAME test_engine_arena_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_arena.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_arena_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
