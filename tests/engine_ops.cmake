# tests/engine_ops.cmake - the engine's device ops and the GPT-2 model (owner: ops/model).
# Timeouts leave room for a cold kernel cache: on a fresh 2-core machine test_engine_model_learn
# takes about 80 s alone (PoCL compiling CLBlast's and the engine's programs), 25 s warm.
ct_add_test(NAME test_engine_ops SOURCES test_engine_ops.c LIBS ct_engine LABELS opencl TIMEOUT 600)
ct_add_test(NAME test_engine_model SOURCES test_engine_model.c LIBS ct_engine LABELS opencl TIMEOUT 600)
ct_add_test(NAME test_engine_model_learn SOURCES test_engine_model_learn.c LIBS ct_engine LABELS opencl TIMEOUT 600)
ct_add_test(NAME test_engine_attention SOURCES test_engine_attention.c LIBS ct_engine LABELS opencl TIMEOUT 600)
# The memory model against the bytes allocated, and the recompute modes' per-layer formula.
ct_add_test(NAME test_engine_mem SOURCES test_engine_mem.c LIBS ct_engine LABELS opencl TIMEOUT 600)
