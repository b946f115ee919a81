#!/bin/sh
# test_engine_bf16.sh TRAIN_GPT MPIEXEC [part] - training in bf16 on one device (issue 27, the
# model's slice) through train_gpt, against the fp32 run of the same flags.
#
# 1. "converge": the tiny GPT of the issue (L 4, NH 4, C 128; B 4, T 16 to fit this machine's
#    budget) trained 300 steps in fp32 and in bf16 from the same init and data (a text of
#    random words, so the loss has a floor well above 0): every bf16 loss finite, the mean of
#    bf16's last 50 losses within 2 % of fp32's, and the two runs not bitwise equal (bf16 did
#    run: its rounding shows in the losses).
# 2. "memory": at the same shape, for the GEMM and the fused attention path, every memory record
#    predicted == allocated in every category; bf16's activation bytes at most 0.55x fp32's;
#    bf16's parameter bytes fp32's plus the bf16 working copy (2 bytes a parameter, 1.5x).
#    --recompute block in bf16 gives bitwise the losses of --recompute none in bf16 (the
#    recomputed forward runs the same bf16 kernels on the same inputs).
# 3. "dp": data parallelism in bf16 (dp 2 as threads with ZeRO-1, as ranks with ZeRO-2,
#    batch 8 split 4 + 4) reproduces the single-device bf16 run (batch 8) within 5e-3 relative on
#    every step's loss over 20 steps (clipping on); the gradients reduce in fp32, the working
#    copy is made after ZeRO's all-gather.
# 4. "refuse": status 2 and a message naming --precision bf16 and the axis before any work, for
#    ZeRO-3, tp 2, pp 2, experts, --recompute attention; an unknown precision.
# 5. "mma": the fused attention's mma variant (attention_mma.cl, here through the portable
#    stand-ins: --gemm mma-emulated picks it, the start-up line says so) trains 10 steps within
#    5e-3 relative of the scalar fused kernel's bf16 losses (--gemm portable, whose start-up line
#    names no mma variant), every step; the two differ in the GEMM path too (both bf16
#    operands, fp32 accumulation), so the bound covers both; not bitwise equal (the variant ran).
# part: "all" (default), "converge", "memory", "dp", "refuse", "mma".
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

# random words: 20 of them, a full stop now and then (awk's seeded generator: the same file on
# every run of this machine's awk; both precisions read the same file in any case)
awk 'BEGIN { srand(7); split("the quick brown fox jumps over a lazy dog while seven old cats " \
     "sleep under warm red blankets and birds sing", w, " ");
     for (i = 0; i < 30000; i++) printf "%s%s", w[int(rand() * 20) + 1], (rand() < 0.1 ? ". " : " ") }' \
    >"$D/words.txt"
ARGS="--layers 4 --heads 4 --dim 128 --seq 16 --batch 4 --lr 1e-3 --text $D/words.txt \
      --sample-len 0 --eval-every 0 --log-every 50 --peak-tflops 1"

if want converge; then
    train conv_fp32 1 1 --steps 300 --precision fp32 &&
        train conv_bf16 1 1 --steps 300 --precision bf16 &&
        if $PY - "$D/conv_fp32.jsonl" "$D/conv_bf16.jsonl" <<'EOF'; then :; else fail "converge"; fi
import json, math, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
f, b = losses(sys.argv[1]), losses(sys.argv[2])
ok = len(f) == 300 and len(b) == 300
if not ok: print("steps: fp32 %d, bf16 %d (300 each expected)" % (len(f), len(b)))
bad = [s for s in sorted(b) if not math.isfinite(b[s])]
if bad: print("bf16: non-finite loss at steps %s" % bad[:10]); ok = False
last = sorted(f)[-50:]
mf = sum(f[s] for s in last) / 50
mb = sum(b.get(s, float("nan")) for s in last) / 50
rel = abs(mb - mf) / mf
if not rel <= 0.02: print("mean of the last 50 losses: bf16 %.6f, fp32 %.6f, %.2f %% apart (2 %% allowed)" % (mb, mf, 100 * rel)); ok = False
if f == b: print("bf16's losses equal fp32's bitwise: bf16 did not run"); ok = False
if ok:
    print("ok: 300 steps, loss %.4f -> %.4f; mean of the last 50: fp32 %.6f, bf16 %.6f (%.3f %% apart)"
          % (b[min(b)], b[max(b)], mf, mb, 100 * rel))
sys.exit(0 if ok else 1)
EOF
fi

# mem FP32 BF16 WHAT: predictions equal allocations in both runs; bf16's activations <= 0.55x
# fp32's; its params fp32's x 1.5 (the working copy).
mem() {
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def rec(p):
    m = [r for r in map(json.loads, open(p)) if r.get("type") == "memory"]
    return m[0] if m else None
f, b, what = rec(sys.argv[1]), rec(sys.argv[2]), sys.argv[3]
ok = f is not None and b is not None
if not ok: print("%s: no memory record" % what); sys.exit(1)
for name, r in (("fp32", f), ("bf16", b)):
    p = r.get("predicted", {})
    for k in ("params", "grads", "optimizer", "activations", "workspace", "comm"):
        if p.get(k) != r[k]:
            print("%s %s: %s allocated %d, predicted %s" % (what, name, k, r[k], p.get(k))); ok = False
ratio = b["activations"] / f["activations"]
if not ratio <= 0.55:
    print("%s: activations bf16 %d, fp32 %d: %.3fx (0.55x allowed)" % (what, b["activations"], f["activations"], ratio)); ok = False
if 2 * b["params"] != 3 * f["params"]:
    print("%s: params bf16 %d, fp32 %d: not the master plus a 2-byte working copy (1.5x)" % (what, b["params"], f["params"])); ok = False
if b["grads"] != f["grads"] or b["optimizer"] != f["optimizer"]:
    print("%s: gradients or optimizer state differ from fp32's (they stay fp32)" % what); ok = False
if ok:
    print("ok: %-10s activations %d -> %d bytes (%.3fx), params %d -> %d, predicted == allocated"
          % (what, f["activations"], b["activations"], ratio, f["params"], b["params"]))
sys.exit(0 if ok else 1)
EOF
}

if want memory; then
    for path in gemm fused; do
        train mem_fp32_$path 1 1 --steps 2 --attention $path --precision fp32 &&
            train mem_bf16_$path 1 1 --steps 2 --attention $path --precision bf16 &&
            mem mem_fp32_$path mem_bf16_$path "$path"
    done
    train rc_none 1 1 --steps 10 --precision bf16 &&
        train rc_block 1 1 --steps 10 --precision bf16 --recompute block &&
        if $PY - "$D/rc_none.jsonl" "$D/rc_block.jsonl" <<'EOF'; then :; else fail "bf16 recompute block"; fi
import json, sys
def tr(p):
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b = tr(sys.argv[1]), tr(sys.argv[2])
if len(a) != 10 or a != b:
    print("bf16: --recompute block's losses differ from none's")
    for s in sorted(a): print(" ", s, a[s], b.get(s))
    sys.exit(1)
print("ok: bf16 --recompute block: 10 steps bitwise those of none")
EOF
fi

# near REF OTHER WHAT: every step's loss of REF in OTHER within 5e-3 relative.
near() {
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def tr(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b, what = tr(sys.argv[1]), tr(sys.argv[2]), sys.argv[3]
worst = max((abs(b[s] - a[s]) / abs(a[s]) if s in b else float("inf")) for s in a) if a else float("inf")
if len(a) != 20 or not worst <= 5e-3:
    print("%s: %d steps, worst relative difference %.3g (5e-3 allowed)" % (what, len(a), worst))
    for s in sorted(a): print(" ", s, a[s], b.get(s))
    sys.exit(1)
print("ok: %-28s 20 steps within %.2g of the single-device bf16 run" % (what, worst))
EOF
}

if want dp; then
    DPA="--steps 20 --batch 8 --grad-clip 0.3 --log-every 1 --precision bf16"
    train dp_ref 1 1 $DPA &&
        train dp_threads_z1 1 2 $DPA --dp 2 --zero 1 &&
        near dp_ref dp_threads_z1 "dp 2 threads ZeRO-1" &&
        train dp_ranks_z2 2 1 $DPA --dp 2 --zero 2 && near dp_ref dp_ranks_z2 "dp 2 ranks ZeRO-2"
fi

if want mma; then
    MA="--steps 10 --log-every 1 --precision bf16 --attention fused"
    train mma_ref 1 1 $MA --gemm portable && train mma_var 1 1 $MA --gemm mma-emulated &&
        logsays "$D/mma_ref.log" "attention path = fused (blocks" &&
        if grep -q "mma variant" "$D/mma_ref.log"; then fail "mma_ref: the log names the mma variant"; fi &&
        logsays "$D/mma_var.log" "bf16 on the mma variant, emulated" &&
        if $PY - "$D/mma_ref.jsonl" "$D/mma_var.jsonl" <<'EOF'; then :; else fail "mma variant"; fi
import json, sys
def tr(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b = tr(sys.argv[1]), tr(sys.argv[2])
worst = max((abs(b[s] - a[s]) / abs(a[s]) if s in b else float("inf")) for s in a) if a else float("inf")
if len(a) != 10 or not worst <= 5e-3 or a == b:
    print("mma variant: %d steps, worst relative difference %.3g (5e-3 allowed)%s"
          % (len(a), worst, "; bitwise equal: the variant did not run" if a == b else ""))
    for s in sorted(a): print(" ", s, a[s], b.get(s))
    sys.exit(1)
print("ok: the mma variant's 10 bf16 steps within %.2g of the scalar fused kernel's" % worst)
EOF
fi

if want refuse; then
    refused "bf16 ZeRO-3" "--precision bf16 with --zero 3 is not built yet" 1 2 --precision bf16 \
        --dp 2 --zero 3 --devices-per-rank 2
    refused "bf16 tp 2" "--precision bf16 with --tp 2 is not built yet" 1 2 --precision bf16 \
        --tp 2 --devices-per-rank 2
    refused "bf16 pp 2" "--precision bf16 with --pp 2 is not built yet" 1 2 --precision bf16 \
        --pp 2 --devices-per-rank 2
    refused "bf16 experts" "--precision bf16 with --experts 4 is not built yet" 1 1 \
        --precision bf16 --experts 4
    refused "bf16 recompute attention" "--precision bf16 with --recompute attention" 1 1 \
        --precision bf16 --recompute attention
    refused "unknown precision" "--precision must be fp32 or bf16 (got 'fp16')" 1 1 \
        --precision fp16
fi
finish
