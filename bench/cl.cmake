# Benchmarks of the device layer. OpenBLAS is the CPU reference measured in the same process.
find_path(CT_OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas-pthread openblas
          PATHS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu)
find_library(CT_OPENBLAS_LIB NAMES openblas)
if(CT_OPENBLAS_INCLUDE AND CT_OPENBLAS_LIB)
  add_executable(bench_gemm ${CMAKE_CURRENT_SOURCE_DIR}/bench_gemm.c ${CMAKE_CURRENT_SOURCE_DIR}/gemm_shapes.c)
  target_include_directories(bench_gemm PRIVATE ${CT_OPENBLAS_INCLUDE} ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(bench_gemm PRIVATE ct_cl ${CT_OPENBLAS_LIB} m)
else()
  message(WARNING "OpenBLAS not found (apt-get install libopenblas-dev): bench_gemm is not built")
endif()
# The CLBlast lock's cost with two devices in one process (cl/clblast.c; docs/BENCHMARKS.md).
add_executable(bench_clblast_lock ${CMAKE_CURRENT_SOURCE_DIR}/bench_clblast_lock.c
               ${CMAKE_CURRENT_SOURCE_DIR}/gemm_shapes.c)
target_include_directories(bench_clblast_lock PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(bench_clblast_lock PRIVATE ct_cl OpenMP::OpenMP_C)
