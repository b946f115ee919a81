# Tests of the device layer (cl/). Two PoCL devices are exposed so multi-device paths run on
# machines without GPUs; on a machine with real devices the variable is ignored by other drivers.
set(CT_TWO_DEVICES "POCL_DEVICES=pthread pthread")
ct_add_test(NAME test_cl_device SOURCES test_cl_device.c LIBS ct_cl LABELS opencl ENV ${CT_TWO_DEVICES})
ct_add_test(NAME test_cl_memory SOURCES test_cl_memory.c LIBS ct_cl LABELS opencl)
ct_add_test(NAME test_cl_async SOURCES test_cl_async.c LIBS ct_cl LABELS opencl)
ct_add_test(NAME test_cl_file SOURCES test_cl_file.c LIBS ct_cl Threads::Threads LABELS unit)
ct_add_test(NAME test_cl_program SOURCES test_cl_program.c LIBS ct_cl LABELS opencl)
ct_add_test(NAME test_cl_gemm SOURCES test_cl_gemm.c LIBS ct_cl LABELS opencl ARGS single)
add_test(NAME test_cl_gemm_batched COMMAND test_cl_gemm batched)
set_tests_properties(test_cl_gemm_batched PROPERTIES LABELS opencl)
ct_add_test(NAME test_cl_threads SOURCES test_cl_threads.c LIBS ct_cl OpenMP::OpenMP_C LABELS opencl ENV ${CT_TWO_DEVICES})
ct_add_test(NAME test_cl_tune SOURCES test_cl_tune.c LIBS ct_cl LABELS opencl)
target_compile_definitions(test_cl_tune PRIVATE CT_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
add_dependencies(test_cl_tune ct_tune)
ct_add_test(NAME test_cl_gemm_bf16 SOURCES test_cl_gemm_bf16.c LIBS ct_cl LABELS opencl)
# The CLBlast lock (cl/clblast.c): first calls of four same-kind devices together, then calls
# under the shared lock, all results exact.
ct_add_test(NAME test_cl_clblast_lock SOURCES test_cl_clblast_lock.c LIBS ct_cl OpenMP::OpenMP_C
            LABELS opencl ENV "POCL_DEVICES=pthread pthread pthread pthread")
ct_add_test(NAME test_cl_gemm_tf32 SOURCES test_cl_gemm_tf32.c LIBS ct_cl LABELS opencl)
