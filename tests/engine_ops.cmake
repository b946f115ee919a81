# tests/engine_ops.cmake - the engine's device ops and the GPT-2 model (owner: ops/model).
ct_add_test(NAME test_engine_ops SOURCES test_engine_ops.c LIBS ct_test_ref LABELS opencl)
ct_add_test(NAME test_engine_model SOURCES test_engine_model.c LIBS ct_test_ref LABELS opencl)
ct_add_test(NAME test_engine_model_learn SOURCES test_engine_model_learn.c LIBS ct_engine LABELS opencl)
# the fused attention, in parts (its argument): the default blocks at head sizes 8, 20, 128; at
# 64 against the GEMM path; other block shapes; the block search
ct_add_test(NAME test_engine_attention SOURCES test_engine_attention.c LIBS ct_test_ref LABELS opencl
            ARGS shapes)
foreach(part hs64 blocks search)
  add_test(NAME test_engine_attention_${part} COMMAND test_engine_attention ${part})
  set_tests_properties(test_engine_attention_${part} PROPERTIES LABELS opencl)
endforeach()
# The memory model against the bytes allocated, and the recompute modes' per-layer formula.
ct_add_test(NAME test_engine_mem SOURCES test_engine_mem.c LIBS ct_engine LABELS opencl)
ct_add_test(NAME test_engine_gemm_select SOURCES test_engine_gemm_select.c LIBS ct_engine
            LABELS opencl)
# The same ops with bf16 storage against the double reference on bf16-rounded inputs (tolerances
# derived in the file), the conversions' round trip and ties, and the storage refusals.
ct_add_test(NAME test_engine_ops_bf16 SOURCES test_engine_ops_bf16.c LIBS ct_test_ref LABELS opencl)
# The fused attention's mma variant (attention_mma.cl) through the portable stand-ins, bf16, head
# sizes 32, 64, 128 at T not a multiple of its blocks (its argument: only these cases).
add_test(NAME test_engine_ops_bf16_mma COMMAND test_engine_ops_bf16 mma)
set_tests_properties(test_engine_ops_bf16_mma PROPERTIES LABELS opencl)
