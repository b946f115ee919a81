# tests/cluster.cmake - emulated hosts (issue 31): scripts/cluster runs MPI ranks in network
# namespaces joined by rate-limited links (root; the parts that need namespaces are skipped,
# status 77, without it).
# test_cluster_rate: bench_allreduce on 2 hosts x 1 rank at 100 and 400 Mbit/s, the bandwidth
#   following the rate (so the data crossed the emulated links, not shared memory).
# test_cluster_train: 2 hosts x 2 ranks, dp 2 x tp 2 (TP inside each host) against the single
#   device; the start-up lines name both hosts.
# test_cluster_script: refusals, the command's exit status, teardown after failure and TERM.
# test_cluster_layouts (slow): dp 8 and every axis on 2 hosts x 2 ranks x 2 threads, pp 2 x dp 2
#   on 4 hosts with its checkpoint resumed on one device, all against the single device.
# test_cluster_hostdeath: every process of one host killed mid-run (2 hosts x 2 ranks, dp 4):
#   the run ends within 10 s naming the lost host; its last checkpoint resumes on one host.
if(TARGET train_gpt AND TARGET bench_allreduce)
  foreach(part rate train script hostdeath layouts)
    add_test(NAME test_cluster_${part}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_cluster.sh $<TARGET_FILE:train_gpt>
                     ${MPIEXEC_EXECUTABLE} ${part} ${CMAKE_SOURCE_DIR}/scripts/cluster
                     $<TARGET_FILE:bench_allreduce>)
    set_tests_properties(test_cluster_${part} PROPERTIES LABELS "mpi;opencl"
                         ENVIRONMENT "OMP_WAIT_POLICY=passive" SKIP_RETURN_CODE 77)
  endforeach()
endif()
# test_slurm (slow): a one-node Slurm started by the test (munged, slurmctld, slurmd; root):
#   srun --mpi=pmi2 -n 2 trains bitwise as mpiexec -n 2; srun --mpi=none is refused.
if(TARGET train_gpt)
  add_test(NAME test_slurm
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_slurm.sh $<TARGET_FILE:train_gpt>
                   ${MPIEXEC_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts)
  set_tests_properties(test_slurm PROPERTIES LABELS "mpi;opencl"
                       ENVIRONMENT "OMP_WAIT_POLICY=passive" SKIP_RETURN_CODE 77)
endif()
