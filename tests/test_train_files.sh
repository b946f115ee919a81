#!/bin/sh
# test_train_files.sh TRAIN_GPT - model files in bf16 and Hugging Face GPT-2 directories, through
# train_gpt (--init, --save-model, --save-dtype), against tests/hf_gpt2_files.py (json + numpy +
# torch: torch's bf16 and f16 rounding, its own Hugging Face layout; torch is imported twice). Losses compared bit for bit (the
# float32 loss and gradient norm printed with 9 significant digits).
#
# 1. --save-dtype bf16 writes llm.c's version 5 holding torch's bf16 of every parameter; the
#    version-5 file trains exactly like an fp32 file of the same (rounded) values.
# 2. --save-model DIR/ writes GPT2LMHeadModel's layout (checked in Python); training from the
#    directory (and from DIR/model.safetensors) equals training from the llm.c file it came from;
#    with --save-dtype bf16 the tensors are torch's bf16.
# 3. Directories written by Python (F32 in one file; three shards through the index; BF16 and F16)
#    train like the llm.c file of the same values (BF16: the fp32 file of torch's rounding).
# 4. Refusals with status 2 naming the problem: a config.json field the engine does not implement,
#    a shape config.json does not give, --save-dtype other than fp32 or bf16.
. "$(dirname "$0")/lib.sh"
TRAIN=$1
HF="$PY $(dirname "$0")/hf_gpt2_files.py"
text_file 200
# V = 300 > the 256 bytes the text uses: wte has 84 padding rows (Vp = 384) Hugging Face does not store
ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 4 --vocab 300 --text $D/text.txt
      --eval-every 0 --sample-len 0 --peak-tflops 1 --lr 1e-3 --warmup 0"

run() { # run NAME args...: train_gpt $ARGS args, log in $D/NAME.log, metrics in $D/NAME.jsonl
    _n=$1
    shift
    if ! logged "$D/$_n.log" "$D/$_n.log" "$TRAIN" $ARGS --metrics "$D/$_n.jsonl" "$@"; then
        fail "$_n: train_gpt failed"; tail -n 5 "$D/$_n.log"; return 1
    fi
}
same() { # same A B WHAT: the train records of A.jsonl and B.jsonl equal (loss, norm), >= 1 step
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def rec(p):
    return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))
            if r.get("type") == "train"]
a, b = rec(sys.argv[1]), rec(sys.argv[2])
ok = len(a) >= 3 and a == b
print("%s %s: %d steps bit for bit, loss %s -> %s" % ("ok:" if ok else "  ", sys.argv[3],
      len(a), a[0][1] if a else "?", a[-1][1] if a else "?"))
if not ok: print("   ", a, "\n   ", b)
sys.exit(0 if ok else 1)
EOF
}

# ---- the model: two steps from random init, so no tensor is at its initial value
run base --steps 2 --save-model "$D/m.bin" || finish
$HF prepare "$D" || { fail "hf_gpt2_files.py prepare"; finish; }
run ref --init "$D/m.bin" --steps 3

# ---- 1. llm.c's bf16 file
if run to5 --init "$D/m.bin" --steps 0 --save-model "$D/m5.bin" --save-dtype bf16; then
    logsays "$D/to5.log" "saved model $D/m5.bin (llm.c GPT-2 format, bf16)"
    run from5 --init "$D/m5.bin" --steps 3 && run fromr --init "$D/mr.bin" --steps 3 &&
        same from5 fromr "a version-5 file trains like the fp32 file of torch's bf16 values"
fi

# ---- 2. the engine's Hugging Face directory
if run tohf --init "$D/m.bin" --steps 0 --save-model "$D/hf/"; then
    logsays "$D/tohf.log" "(Hugging Face directory, fp32)"
    run fromhf --init "$D/hf/" --steps 3 && same ref fromhf "--init DIR/ trains like the llm.c file"
    run fromhfst --init "$D/hf/model.safetensors" --steps 3 &&
        same ref fromhfst "--init DIR/model.safetensors trains like the llm.c file"
fi
run tohfb --init "$D/m.bin" --steps 0 --save-model "$D/hfb/" --save-dtype bf16

# ---- 3. directories written by Python
run py1 --init "$D/py1" --steps 3 && same ref py1 "Python's F32 directory trains like the llm.c file"
run py3 --init "$D/py3" --steps 3 &&
    same ref py3 "Python's three shards (index) train like the llm.c file"
run pyb --init "$D/pyb" --steps 3 &&
    same fromr pyb "Python's BF16 shards train like the fp32 file of torch's bf16 values"
run pyh --init "$D/pyh" --steps 0 --save-model "$D/pyh.bin"
# the files checked against torch: m5.bin, hf/, hfb/ and pyh.bin (the F16 directory as read)
$HF check "$D" || fail "the files against torch's bf16 and f16 and its Hugging Face layout"

# ---- 4. refusals
expect_refusal "activation relu" '"activation_function": relu is not implemented' \
    "$TRAIN" $ARGS --init "$D/bad_act" --steps 1
expect_refusal "unknown field" 'field "rope_scaling"' "$TRAIN" $ARGS --init "$D/bad_rope" --steps 1
expect_refusal "shape mismatch" 'tensor "transformer.wpe.weight" has shape (16, 32), but config.json' \
    "$TRAIN" $ARGS --init "$D/bad_shape" --steps 1
expect_refusal "--save-dtype fp16" "--save-dtype must be fp32 or bf16 (got 'fp16')" \
    "$TRAIN" $ARGS --save-dtype fp16 --steps 1
finish
