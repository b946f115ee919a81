# tests/suites.cmake - which pass runs each test, what time each may take, how tests share the
# machine: the one place that decides it (included by tests/CMakeLists.txt after every fragment;
# docs/RELIABILITY.md section 7 gives the passes' times).
#
#   pass        command                         runs                          where
#   normal      scripts/test                    every test but the slow ones  CI's first pass
#   sanitizer   scripts/test --sanitize         the asan tests, built with    CI's second pass
#                                               ASan + UBSan (build-asan/)
#   everything  scripts/test --all [--sanitize] every test                    before a release
#
# asan: the tests whose host paths the sanitizer pass must cover, each path once. The normal pass
#       runs them too (they are ordinary tests there).
# slow: sweeps, searches, transport repeats and 8-rank duplicates: what CI leaves out because
#       another test it runs covers the same path; `scripts/test --all` still runs every one.
# A test is never both (configuring fails), and every name below must be a registered test.

set(CT_ASAN_TESTS
  # every reader of outside bytes: the fuzz targets' corpora and the inputs the fuzzers found
  fuzz_replay_model_file fuzz_replay_shards fuzz_replay_checkpoint fuzz_replay_manifest
  fuzz_replay_tokenizer fuzz_replay_tune fuzz_replay_select
  test_engine_io_shards               # sharded checkpoints: partial reads, damage, hygiene
  fuzz_replay_hf_config fuzz_replay_hf_model fuzz_replay_hf_index  # Hugging Face directories
  fuzz_replay_hf_llama_model          # a Hugging Face Llama directory's tensors
  test_engine_io_hf_llama             # Llama directories written, read, every refusal named
  test_engine_io                      # shards, llm.c models, checkpoints (every damage), tokenizer
  test_engine_io_hf                   # bf16 files, Hugging Face directories written, refusals
  test_engine_io_train                # the option parser, JSON Lines, schedules
  test_cl_program                     # the kernel cache's files: corrupt and truncated entries
  test_cl_file                        # atomic writes from several threads, whole-file reads
  test_engine_moe_layout_files        # safetensors written and read, damaged files refused
  test_engine_plan                    # the planner's pure half, the links file
  test_parallel_sched parallel_select test_ct_pipeline  # schedules as data, the selector table
  # the memory model and the arena
  test_cl_memory                      # accounting, the cap, cl/'s arena and its range copies
  test_engine_mem                     # the memory model against every allocation
  test_engine_arena_refuse            # the model's arena and state cut at the exact limit
  # devices, one and two per process
  test_cl_device test_cl_async test_cl_threads
  test_cl_gemm_bf16                   # the GEMM paths' dispatch, the probe's own context, bf16
  # every transport for each collective family, and point-to-point
  parallel_coll_1x2                   # threads (--full: every algorithm, every count)
  parallel_coll_2x1                   # ranks (--full)
  parallel_coll_2x2                   # mixed
  parallel_coll_1x3                   # a group that is not a power of two
  parallel_coll_device_2x2            # device buffers staged through host memory, mixed
  parallel_p2p_2x2 parallel_grid_2x3
  # allocation fault injection (the leak check is what makes it a test)
  test_engine_alloc_faults_1x1 test_engine_alloc_faults_2x1
  # error and timeout paths
  parallel_errors_2x2 parallel_errors_nothread parallel_errors_preinit
  parallel_timeout_2x2_a parallel_timeout_2x2_b
  test_programs_cli                   # every program's command line
  test_ct_plot                        # ct_plot: metrics, traces and CSVs, damaged and random bytes
  # reliability: non-finite steps, checkpoint hygiene, one worker's failure ending the job
  test_engine_reliability_nonfinite test_engine_reliability_checkpoints
  test_engine_reliability_failures test_engine_nonfinite_1x2
  test_engine_reliability_shards_async # a save's background thread and exchange beside training
  # one multi-worker layout per parallel feature
  test_engine_step_2x2                # the executor through the library: ZeRO 0-3, mixed
  test_engine_dp_zero3                # dp 4 ZeRO-3 mixed, sampling, its checkpoint resumed
  test_engine_tp_layout_sp            # tp 4 with sequence parallelism, mixed
  test_engine_tp_1x2shared            # TP's device-resident collectives (threads, one context)
  test_engine_pp_zb1                  # pp 4 zb1 mixed, sampling and the model file
  test_engine_moe_layout_ep           # dp 4 (ep 2) ZeRO-1 mixed: the all-to-all
  test_engine_moe_2x2                 # the MoE layer over EP and TP groups
  test_engine_layout_every            # dp (ep) x tp x pp with SP at W = 8
  test_engine_trace                   # the trace writer on every layout kind
)

set(CT_SLOW_TESTS
  test_engine_bf16_converge           # two 300-step trainings (bf16 against fp32): 90 s cold
  test_engine_loss_chunk_big          # one step of 49152 tokens x V 50257 (minutes on 2 cores)
  test_engine_pieces_big              # 2^31 + 1000 bf16 elements, a 2^31-float GEMM buffer (8 GiB)
  # searches and sweeps
  test_cl_tune                        # ct_tune's candidate search (the text form: fuzz_replay_tune)
  test_engine_attention_search        # the fused attention's block search
  test_engine_arena_sweep             # four more limits for one layout (arena_layouts cuts at one)
  test_ct_plan_measured               # ct_plan's calibration and timed --layout auto runs
  test_engine_reliability_shards_oom  # a failing host allocation at 16 points of a step and save
  # transport repeats: the same layouts as a threads part, over ranks (the mixed parts cross
  # processes with the same code)
  test_engine_dp_ranks test_engine_tp_layout_ranks test_engine_pp_repeats
  test_engine_moe_layout_ranks
  test_engine_step_1x1 test_engine_step_1x2 test_engine_step_2x1  # _2x2 runs both transports
  test_engine_moe_1x2 test_engine_moe_2x1                         # _1x1 and _2x2 stay
  test_engine_tp_1x2 test_engine_tp_2x1 test_engine_tp_1x3shared  # _1x2rows, _1x3, _2x2 stay
  test_engine_nonfinite_1x1           # _1x2's worker 0 trains the single device alike
  # resume across layouts, where another script resumes the same state (dp, tp, pp resume
  # parts; experts in test_engine_moe_layout_tp)
  test_engine_moe_layout_resume test_engine_layout_resume
  # 8 ranks: the same W = 8 layouts run as 2 ranks x 4 threads in the CI passes
  test_engine_layout_ranks parallel_coll_7x1 parallel_coll_8x1 parallel_grid_8x1
  # emulated hosts: the layouts' tests again over a network (test_cluster_train stays in CI)
  test_cluster_layouts
)

# Time budgets in seconds, per test, on CI's 2-core machine with two tests at a time and a cold
# kernel cache: scripts/test fails a run naming every test over its budget. CTest kills a test
# at three times its budget (a hang then costs minutes, not the whole run).
set(CT_BUDGET_NORMAL 90)
set(CT_BUDGET_SANITIZE 150)
set(CT_BUDGET_SLOW 900)

# Tests that must have the machine alone: they measure time, or wait on deadlines.
set(CT_SERIAL_TESTS
  parallel_timeout_3x1_a parallel_timeout_3x1_b parallel_timeout_1x3_a parallel_timeout_2x2_a
  parallel_timeout_2x2_b test_engine_reliability_failures test_ct_plan test_ct_plan_measured
  test_cluster_rate                   # bandwidth over emulated links against the set rate
)

# The longest tests start first when two run at once (seconds, measured on this project's
# 2-core VM with a cold kernel cache; CTest keeps its own figures after the first run).
set(CT_TEST_COSTS
  test_cl_gemm 30 test_cl_gemm_batched 25 test_engine_attention 25 test_engine_attention_hs64 25
  test_engine_attention_blocks 25 test_engine_mem 17 test_cl_gemm_bf16 18
  test_engine_arena_layouts 20 test_train_cli 18 test_engine_pp_mixed 17 test_engine_torch 13
  test_engine_moe_layout_tp 13 test_engine_split 12 test_engine_arena_state 11
  test_engine_gemm_plan_tf32 30 test_engine_gemm_plan_emulated 23
  test_engine_layout_moe 10 test_engine_moe_layout_recompute 11 test_engine_bf16_converge 30
  test_engine_bf16_pp 25 test_engine_bf16_pp_zb 25 test_engine_bf16_ep 41
  test_engine_bf16_grad_reduce 25 test_engine_bf16_grad_reduce_odd 25
  test_engine_bf16_mixed_pp 30 test_engine_bf16_mixed_ep 30 test_engine_bf16_tp 28
  test_engine_llama_torch 15 test_engine_llama_dp 12 test_engine_llama_pp 12
  test_engine_ops_bf16_mma 33
  test_engine_llama_tp 20 test_engine_llama_tpck 15 test_engine_llama_moe 12
  test_engine_llama_bf16 12)

# ---------------------------------------------------------------- applied
get_property(ct_registered DIRECTORY PROPERTY TESTS)
foreach(list_name CT_ASAN_TESTS CT_SLOW_TESTS CT_SERIAL_TESTS)
  foreach(t IN LISTS ${list_name})
    if(NOT t IN_LIST ct_registered AND NOT CT_FUZZ)
      message(FATAL_ERROR "tests/suites.cmake: ${list_name} names '${t}', which is not a registered test")
    endif()
  endforeach()
endforeach()
foreach(t IN LISTS CT_ASAN_TESTS)
  if(t IN_LIST CT_SLOW_TESTS)
    message(FATAL_ERROR "tests/suites.cmake: '${t}' is both asan and slow; a test is one or the other")
  endif()
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY LABELS asan)
  endif()
endforeach()
foreach(t IN LISTS CT_SLOW_TESTS)
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY LABELS slow)
  endif()
endforeach()
foreach(t IN LISTS CT_SERIAL_TESTS)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES RUN_SERIAL ON)
  endif()
endforeach()
set(ct_costs ${CT_TEST_COSTS})
while(ct_costs)
  list(POP_FRONT ct_costs t cost)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES COST ${cost})
  endif()
endwhile()

# every test's budget (and its timeout), written for scripts/test_times
set(ct_budgets "")
foreach(t IN LISTS ct_registered)
  get_test_property(${t} LABELS labels)
  if("slow" IN_LIST labels)
    set(b ${CT_BUDGET_SLOW})
  elseif(CT_SANITIZE)
    set(b ${CT_BUDGET_SANITIZE})
  else()
    set(b ${CT_BUDGET_NORMAL})
  endif()
  math(EXPR timeout "3 * ${b}")
  set_tests_properties(${t} PROPERTIES TIMEOUT ${timeout})
  string(APPEND ct_budgets "${t} ${b}\n")
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/test-budgets.txt ${ct_budgets})
