# tests/engine_pieces.cmake - 64-bit sizes (issue 30, item 5): the element-wise launches in
# pieces of ct_launch_piece_max() (its test hook CT_TEST_MAX_LAUNCH) bitwise one launch's, for the
# ops and a short training in fp32 and bf16 ("ops", "train"); "big": one bf16 view of 2^31 + 1000
# elements through the pieces, the GEMM limit at its edge (slow: 8 GiB at most).
ct_add_test(NAME test_engine_pieces_big SOURCES test_engine_pieces.c LIBS ct_engine
            LABELS opencl ARGS big)
if(TARGET train_gpt)
  foreach(part ops train)
    add_test(NAME test_engine_pieces_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_engine_pieces.sh $<TARGET_FILE:train_gpt>
                     $<TARGET_FILE:test_engine_pieces_big> ${MPIEXEC_EXECUTABLE} ${part})
    set_tests_properties(test_engine_pieces_${part} PROPERTIES LABELS "opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
