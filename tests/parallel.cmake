# tests/parallel.cmake - parallel/ tests: every collective algorithm under mpiexec at several
# rank x thread shapes (label mpi), error paths, and the selector table (label unit).
if(TARGET ct_parallel)
  # one executable, registered once per rank x thread shape (ct_add_test would add a bare run)
  add_executable(test_parallel_coll test_parallel_coll.c)
  target_link_libraries(test_parallel_coll PRIVATE ct_parallel)
  target_include_directories(test_parallel_coll PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  # name  ranks  threads  extra args
  set(CT_PAR_SHAPES
    "1x1;1;1;--full" "2x1;2;1;--full" "1x2;1;2;--full" "3x1;3;1;" "1x3;1;3;" "2x2;2;2;"
    "4x1;4;1;" "1x4;1;4;" "5x1;5;1;" "7x1;7;1;" "8x1;8;1;" "4x2;4;2;" "2x4;2;4;"
    "1x8;1;8;")
  foreach(i RANGE 0 13)
    math(EXPR j "${i} * 4")
    list(SUBLIST CT_PAR_SHAPES ${j} 4 s)
    list(GET s 0 nm)
    list(GET s 1 nr)
    list(GET s 2 nt)
    list(GET s 3 ex)
    add_test(NAME parallel_coll_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_parallel_coll> ${nt} ${ex})
    set_tests_properties(parallel_coll_${nm} PROPERTIES LABELS "mpi"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
  # device buffers: 2 PoCL devices per process, threads and mixed
  foreach(shape "1x2;1;2" "2x2;2;2" "3x1;3;1")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME parallel_coll_device_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_parallel_coll> ${nt} --device --big=20001)
    set_tests_properties(parallel_coll_device_${nm} PROPERTIES LABELS "mpi;opencl"
      ENVIRONMENT "OMP_WAIT_POLICY=passive;POCL_DEVICES=pthread pthread")
  endforeach()
endif()
if(TARGET ct_parallel)
  add_executable(test_parallel_errors test_parallel_errors.c)
  target_link_libraries(test_parallel_errors PRIVATE ct_parallel)
  target_include_directories(test_parallel_errors PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  foreach(shape "2x2;2;2" "3x1;3;1" "1x3;1;3")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME parallel_errors_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_parallel_errors> ${nt})
    set_tests_properties(parallel_errors_${nm} PROPERTIES LABELS "mpi"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
  add_test(NAME parallel_errors_nothread
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:test_parallel_errors> nothread)
  add_test(NAME parallel_select
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 $<TARGET_FILE:test_parallel_errors> select)
  add_test(NAME parallel_errors_preinit
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:test_parallel_errors> preinit)
  set_tests_properties(parallel_errors_preinit PROPERTIES LABELS "mpi"
    ENVIRONMENT "OMP_WAIT_POLICY=passive")
  set_tests_properties(parallel_errors_nothread PROPERTIES LABELS "mpi")
  set_tests_properties(parallel_select PROPERTIES LABELS "unit")
endif()
if(TARGET ct_parallel)
  # the grid: every layout of W = 1..8 workers as threads, ranks and mixed (pure comm: no devices)
  add_executable(test_parallel_grid test_parallel_grid.c)
  target_link_libraries(test_parallel_grid PRIVATE ct_parallel)
  target_include_directories(test_parallel_grid PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  foreach(shape "1x1;1;1" "2x1;2;1" "1x2;1;2" "3x1;3;1" "1x3;1;3" "4x1;4;1" "1x4;1;4" "2x2;2;2"
                "5x1;5;1" "1x5;1;5" "6x1;6;1" "2x3;2;3" "3x2;3;2" "7x1;7;1" "1x7;1;7" "8x1;8;1"
                "1x8;1;8" "2x4;2;4" "4x2;4;2")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME parallel_grid_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_parallel_grid> ${nt})
    set_tests_properties(parallel_grid_${nm} PROPERTIES LABELS "mpi"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
if(TARGET ct_parallel)
  # pipeline schedules as data: pure, no MPI launch, no devices
  ct_add_test(NAME test_parallel_sched SOURCES test_parallel_sched.c LIBS ct_parallel LABELS unit)
endif()
if(TARGET ct_parallel)
  # non-blocking point-to-point: threads, ranks and mixed
  add_executable(test_parallel_p2p test_parallel_p2p.c)
  target_link_libraries(test_parallel_p2p PRIVATE ct_parallel)
  target_include_directories(test_parallel_p2p PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  foreach(shape "2x1;2;1" "1x2;1;2" "3x1;3;1" "1x3;1;3" "1x4;1;4" "2x2;2;2" "2x3;2;3" "4x1;4;1")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME parallel_p2p_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_parallel_p2p> ${nt})
    set_tests_properties(parallel_p2p_${nm} PROPERTIES LABELS "mpi"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
if(TARGET ct_parallel)
  # CT_COMM_TIMEOUT (2 s in the test): a worker that never comes (a), counts that differ between
  # processes with check mode off (b); every worker must come back with an error within 10 s
  foreach(shape "3x1;3;1;a" "3x1;3;1;b" "1x3;1;3;a" "2x2;2;2;a" "2x2;2;2;b")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    list(GET shape 3 part)
    add_test(NAME parallel_timeout_${nm}_${part}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nr} $<TARGET_FILE:test_parallel_errors> timeout ${nt} ${part})
    set_tests_properties(parallel_timeout_${nm}_${part} PROPERTIES LABELS "mpi"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()

if(TARGET ct_parallel)
  # several hosts on one machine: Hydra gives each entry of -hosts its own node (localhost and
  # 127.0.0.1 are both this machine, started without ssh), so the topology sees two hosts and the
  # hierarchical all-reduce runs its hosts' levels (shared memory still carries the data; the
  # emulated hosts of tests/cluster.cmake put a network between them)
  foreach(shape "hosts_2x2x1;localhost:2,127.0.0.1:2;4;1" "hosts_2x2x2;localhost:2,127.0.0.1:2;4;2"
                "hosts_1p2;localhost:1,127.0.0.1:2;3;1")
    list(GET shape 0 nm)
    list(GET shape 1 hl)
    list(GET shape 2 nr)
    list(GET shape 3 nt)
    add_test(NAME parallel_coll_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} -hosts ${hl} ${MPIEXEC_NUMPROC_FLAG} ${nr}
              $<TARGET_FILE:test_parallel_coll> ${nt} --nodes=2)
    set_tests_properties(parallel_coll_${nm} PROPERTIES LABELS "mpi"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
  foreach(shape "hosts_2x2x1;4;1" "hosts_2x2x2;4;2")
    list(GET shape 0 nm)
    list(GET shape 1 nr)
    list(GET shape 2 nt)
    add_test(NAME parallel_grid_${nm}
      COMMAND ${MPIEXEC_EXECUTABLE} -hosts localhost:2,127.0.0.1:2 ${MPIEXEC_NUMPROC_FLAG} ${nr}
              $<TARGET_FILE:test_parallel_grid> ${nt} --nodes=2)
    set_tests_properties(parallel_grid_${nm} PROPERTIES LABELS "mpi"
      ENVIRONMENT "OMP_WAIT_POLICY=passive")
  endforeach()
endif()
