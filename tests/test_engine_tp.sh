#!/bin/sh
# test_engine_tp.sh TRAIN_GPT MPIEXEC [part] - tensor parallelism (issue 9) through train_gpt.
#
# 1. Every layout trains the same global batch as one device, with gradient accumulation (2
#    micro-batches) and clipping on (--grad-clip below the norms): tp = 2 and 4 as threads
#    (--devices-per-rank), as MPI ranks and mixed (a TP group across two ranks), sequence
#    parallelism on and off, the input-gradient overlap on and off, dp 2 x tp 2 with ZeRO 1, 2
#    and 3, tp 2 x pp 2: the 20 losses match the single-device run within 1e-5 relative.
# 2. The "memory" records give each worker's model state within 5 % of the ZeRO formulas applied
#    to psi_tp = (TP-split parameters) / tp + replicated ones, over its DP group.
# 3. Checkpoints stay gathered: written at tp = 4 (with SP) they resume on one device and at
#    dp 2 x tp 2 (ZeRO-1); written at dp 2 x tp 2 they resume at tp = 4, each continuing the
#    single-device loss curve. Sampling (a collective forward; SP pads the context),
#    evaluation and --save-model run under TP without hanging.
# 4. Layouts TP cannot split are refused with status 2 and a message before any work.
# part: "all" (default), "threads", "ranks", "mixed", "resume", "refuse".
set -u
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}
D=$(mktemp -d /tmp/ct_test_tp.XXXXXX)
trap 'rm -rf "$D"' EXIT
PY=/usr/bin/python3
export OMP_WAIT_POLICY=passive
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

$PY -c "open('$D/text.txt','w').write('the quick brown fox jumps over the lazy dog. ' * 300)"
# heads 4, dim 32, Vp 256, T 16: tp 2 and 4 divide them all
ARGS="--layers 2 --heads 4 --dim 32 --seq 16 --batch 4 --total-batch 128 --steps 20 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.01"

# compare REF.jsonl OTHER.jsonl "what" [first_step]: losses within 1e-5 relative.
compare() {
    if $PY - "$1" "$2" "$3" "${4:-0}" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def losses(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if r.get("type") == "train": out[r["step"]] = (r["loss"], r["grad_norm"])
    return out
a, b, what, first = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3], int(sys.argv[4])
steps = [s for s in sorted(a) if s >= first]
if not steps or any(s not in b for s in steps):
    print("missing steps in", what, sorted(b)); sys.exit(1)
worst = max(abs(a[s][0] - b[s][0]) / abs(a[s][0]) for s in steps)
clipped = sum(1 for s in steps if a[s][1] > 0.3)
print("ok: %-44s %d steps, worst relative loss difference %.2e, %d steps clipped, "
      "loss %.6f -> %.6f" % (what, len(steps), worst, clipped, b[steps[0]][0], b[steps[-1]][0]))
sys.exit(0 if worst <= 1e-5 else 1)
EOF
}

# memcheck FILE WORKERS: every worker's model state within 5 % of the formula for psi_tp.
memcheck() {
    if $PY - "$1" "$2" <<'EOF'; then :; else fail "memory records $1"; fi
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
recs = [json.loads(l) for l in open(path)]
cfg = [r for r in recs if r.get("type") == "config"][0]
mem = [r for r in recs if r.get("type") == "memory"]
L, C, Vp, T, tp, dp, zero = cfg["layers"], cfg["dim"], 256, 16, cfg["tp"], cfg["dp"], cfg["zero"]
# psi_tp from the shapes, independently of the engine: split tensors / tp + replicated ones
split = Vp * C + L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C)
repl = T * C + L * (2 * C + C + 2 * C + C) + 2 * C
psi = split / tp + repl
f = {0: 16 * psi, 1: 8 * psi + 8 * psi / dp, 2: 4 * psi + 12 * psi / dp, 3: 16 * psi / dp}[zero]
ok = len(mem) == n and all(abs(r["psi_tp"] - psi) < 0.5 for r in mem)
for r in mem:
    st = r["params"] + r["grads"] + r["optimizer"]
    ok &= abs(st - f) <= 0.05 * f
print("%s: memory tp %d dp %d ZeRO-%d: %d records, psi_tp %.0f, model state %s vs formula %.0f" %
      ("ok" if ok else "FAIL", tp, dp, zero, len(mem), psi,
       sorted(set(r["params"] + r["grads"] + r["optimizer"] for r in mem)), f))
sys.exit(0 if ok else 1)
EOF
}

# run NAME RANKS DEVICES_PER_RANK POCL_COUNT args...
run() {
    name=$1; nr=$2; dpr=$3; npocl=$4; shift 4
    pd=$(for i in $(seq "$npocl"); do printf 'pthread '; done)
    if [ "$nr" -gt 1 ]; then
        POCL_DEVICES="$pd" "$MPIEXEC" -n "$nr" "$TRAIN" $ARGS --devices-per-rank "$dpr" \
            --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1
    else
        POCL_DEVICES="$pd" "$TRAIN" $ARGS --devices-per-rank "$dpr" --metrics "$D/$name.jsonl" \
            "$@" >"$D/$name.log" 2>&1
    fi
    rc=$?
    if [ $rc -ne 0 ]; then fail "$name: exit status $rc"; tail -n 5 "$D/$name.log"; return 1; fi
    return 0
}

need_ref() {
    [ -f "$D/ref.jsonl" ] || run ref 1 1 1 || { echo "FAIL: no reference"; exit 1; }
}

if want threads; then
    need_ref
    run t2 1 2 2 --tp 2 && compare "$D/ref.jsonl" "$D/t2.jsonl" "threads tp 2" &&
        memcheck "$D/t2.jsonl" 2
    run t2s 1 2 2 --tp 2 --sequence-parallel 1 --tp-overlap 0 &&
        compare "$D/ref.jsonl" "$D/t2s.jsonl" "threads tp 2 SP, overlap off"
    run t4 1 4 4 --tp 4 --tp-overlap 0 && compare "$D/ref.jsonl" "$D/t4.jsonl" "threads tp 4, overlap off"
    run t4s 1 4 4 --tp 4 --sequence-parallel 1 &&
        compare "$D/ref.jsonl" "$D/t4s.jsonl" "threads tp 4 SP" && memcheck "$D/t4s.jsonl" 4
    # the fused attention kernels on each worker's heads
    run t2f 1 2 2 --tp 2 --sequence-parallel 1 --attention fused &&
        compare "$D/ref.jsonl" "$D/t2f.jsonl" "threads tp 2 SP, fused attention"
    run t22z2 1 4 4 --tp 2 --dp 2 --zero 2 --sequence-parallel 1 &&
        compare "$D/ref.jsonl" "$D/t22z2.jsonl" "threads dp 2 x tp 2 SP ZeRO-2" &&
        memcheck "$D/t22z2.jsonl" 4
fi
if want ranks; then
    need_ref
    run r2s 2 1 1 --tp 2 --sequence-parallel 1 && compare "$D/ref.jsonl" "$D/r2s.jsonl" "ranks tp 2 SP"
    run r4 4 1 1 --tp 4 && compare "$D/ref.jsonl" "$D/r4.jsonl" "ranks tp 4" &&
        memcheck "$D/r4.jsonl" 4
fi
if want mixed; then
    need_ref
    # tp 4 over 2 ranks x 2 threads: every TP collective crosses processes
    run m4s 2 2 2 --tp 4 --sequence-parallel 1 &&
        compare "$D/ref.jsonl" "$D/m4s.jsonl" "mixed 2x2 tp 4 SP"
    run m22z1 2 2 2 --dp 2 --tp 2 --zero 1 &&
        compare "$D/ref.jsonl" "$D/m22z1.jsonl" "mixed 2x2 dp 2 x tp 2 ZeRO-1" &&
        memcheck "$D/m22z1.jsonl" 4
    # tp 2 inside each process x a 2-stage pipeline across the ranks (1F1B, SP on)
    run m2pp2 2 2 2 --tp 2 --pp 2 --sequence-parallel 1 &&
        compare "$D/ref.jsonl" "$D/m2pp2.jsonl" "mixed 2x2 tp 2 x pp 2 SP (1f1b)"
    run m22z3s 2 2 2 --dp 2 --tp 2 --zero 3 --sequence-parallel 1 &&
        compare "$D/ref.jsonl" "$D/m22z3s.jsonl" "mixed 2x2 dp 2 x tp 2 SP ZeRO-3" &&
        memcheck "$D/m22z3s.jsonl" 4
fi
if want resume; then
    need_ref
    # written at tp 4 with SP at step 10 ...
    if run w4 1 4 4 --tp 4 --sequence-parallel 1 --save "$D/ck4" --save-every 10; then
        # ... resumed on one device and at dp 2 x tp 2 with ZeRO-1
        run res1 1 1 1 --resume "$D/ck4/ckpt_00000010.bin" &&
            compare "$D/ref.jsonl" "$D/res1.jsonl" "resume tp 4 SP -> 1 device" 10
        run res22 2 2 2 --dp 2 --tp 2 --zero 1 --resume "$D/ck4/ckpt_00000010.bin" &&
            compare "$D/ref.jsonl" "$D/res22.jsonl" "resume tp 4 SP -> dp 2 x tp 2 ZeRO-1" 10
    fi
    # ... and back: written at dp 2 x tp 2 (ZeRO-3), resumed at tp 4
    if run w22 2 2 2 --dp 2 --tp 2 --zero 3 --save "$D/ck22" --save-every 10; then
        run res4 1 4 4 --tp 4 --resume "$D/ck22/ckpt_00000010.bin" &&
            compare "$D/ref.jsonl" "$D/res4.jsonl" "resume dp 2 x tp 2 ZeRO-3 -> tp 4" 10
    fi
    # sampling (collective; SP pads the context), evaluation and --save-model under TP
    if run t2smp 1 2 2 --tp 2 --sequence-parallel 1 --steps 4 --sample-len 9 --sample-every 2 \
           --eval-every 2 --save-model "$D/tpmodel.bin"; then
        if grep -q "val loss" "$D/t2smp.log" && grep -q -- "---- sample at step 2" "$D/t2smp.log" &&
           [ -s "$D/tpmodel.bin" ] && run one 1 1 1 --init "$D/tpmodel.bin" --steps 0 --eval-every 0; then
            echo "ok: tp 2 SP with sampling, evaluation and --save-model (the file loads on one device)"
        else
            fail "TP sampling / evaluation / save-model"; tail -n 5 "$D/t2smp.log"
        fi
    fi
fi
if want refuse; then
    # expect_bad "what" "message part" RANKS POCL args...
    expect_bad() {
        what=$1; msg=$2; nr=$3; npocl=$4; shift 4
        pd=$(for i in $(seq "$npocl"); do printf 'pthread '; done)
        if [ "$nr" -gt 1 ]; then
            POCL_DEVICES="$pd" "$MPIEXEC" -n "$nr" "$TRAIN" $ARGS --metrics "$D/bad.jsonl" "$@" \
                >"$D/stdout" 2>"$D/stderr"
        else
            POCL_DEVICES="$pd" "$TRAIN" $ARGS --metrics "$D/bad.jsonl" "$@" >"$D/stdout" 2>"$D/stderr"
        fi
        rc=$?
        if [ $rc -ne 2 ]; then fail "$what: exit status $rc, expected 2"; cat "$D/stderr"; return; fi
        if ! grep -qF -- "$msg" "$D/stderr"; then fail "$what: message lacks '$msg'"; cat "$D/stderr"; return; fi
        if [ -s "$D/bad.jsonl" ]; then fail "$what: metrics written (work started)"; return; fi
        rm -f "$D/bad.jsonl"
        echo "ok: refused $what: $(grep -F -- "$msg" "$D/stderr" | head -n 1 | cut -c1-150)"
    }
    expect_bad "heads % tp" "does not divide the 4 attention heads" 1 3 --tp 3 --devices-per-rank 3
    expect_bad "Vp % tp" "does not divide the padded vocabulary Vp = 256" 1 3 --tp 3 \
        --devices-per-rank 3 --heads 6 --dim 36
    expect_bad "T % tp with SP" "does not divide the sequence length T = 18" 1 4 --tp 4 \
        --devices-per-rank 4 --seq 18 --total-batch 0 --sequence-parallel 1
    expect_bad "SP without TP" "--sequence-parallel 1 needs tensor parallelism" 1 1 --sequence-parallel 1
    expect_bad "layout vs workers" "--dp 1 x --tp 2 x --pp 1 = 2 does not match the 1 workers" 1 1 --tp 2
    expect_bad "layout vs ranks" "--dp 2 x --tp 2 x --pp 1 = 4 does not match the 2 workers" 2 1 --tp 2 --dp 2
    expect_bad "--tp 0" "--tp must be >= 1" 1 1 --tp 0
    expect_bad "zb1 with TP" "--schedule zb1 with --tp 2" 1 4 --tp 2 --pp 2 --devices-per-rank 4 \
        --schedule zb1
fi

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all passed"
