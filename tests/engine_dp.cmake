# tests/engine_dp.cmake - data parallelism and ZeRO through train_gpt (issue 5): threads, ranks
# and mixed layouts against the single-device losses, memory records, resume under another
# layout, refused layouts. One script, registered per part so each stays short.
if(TARGET train_gpt)
  foreach(part threads ranks mixed resume refuse)
    add_test(NAME test_engine_dp_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_dp.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_dp_${part} PROPERTIES LABELS "mpi;opencl" TIMEOUT 600
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
