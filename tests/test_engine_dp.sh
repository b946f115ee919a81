#!/bin/sh
# test_engine_dp.sh TRAIN_GPT MPIEXEC [part] - data parallelism (issue 5) through train_gpt.
#
# 1. Every layout trains the same global batch as one device: DP (ZeRO-0, 1, 2, 3) over N = 2,
#    3 and 4 workers as threads (--devices-per-rank), as MPI ranks and mixed, with gradient
#    accumulation (2 micro-batches) and clipping on (--grad-clip below the norms), overlap on and
#    off, small buckets (several per step): the 20 losses match the single-device run within
#    1e-5 relative.
# 2. The "memory" records (one per worker) give model-state bytes within 5 % of the ZeRO
#    formulas (16 Psi; 8 Psi + 8 Psi / N; 4 Psi + 12 Psi / N; 16 Psi / N).
# 3. A checkpoint written under one layout (2 threads, ZeRO-1) resumes under another (3 ranks,
#    ZeRO-0; 2x2 ZeRO-2; 1 device), and one written by 2 ranks with ZeRO-3 resumes on 1 device,
#    continuing the single-device loss curve. Under ZeRO-3 sampling, evaluation and --save-model
#    (collective there) run without hanging.
# 4. Impossible layouts are refused with status 2 and a message before any work.
# part: "all" (default), "threads", "ranks", "mixed", "resume", "refuse".
set -u
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}
D=$(mktemp -d /tmp/ct_test_dp.XXXXXX)
trap 'rm -rf "$D"' EXIT
PY=/usr/bin/python3
export OMP_WAIT_POLICY=passive
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

$PY -c "open('$D/text.txt','w').write('the quick brown fox jumps over the lazy dog. ' * 300)"
ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 12 --total-batch 384 --steps 20 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.03"

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
print("ok: %-40s %d steps, worst relative loss difference %.2e, %d steps clipped, "
      "loss %.6f -> %.6f" % (what, len(steps), worst, clipped, b[steps[0]][0], b[steps[-1]][0]))
sys.exit(0 if worst <= 1e-5 else 1)
EOF
}

# memcheck FILE N ZERO: every worker's model state within 5 % of the formula.
memcheck() {
    if $PY - "$1" "$2" "$3" <<'EOF'; then :; else fail "memory records $1"; fi
import json, sys
path, n, zero = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
recs = [json.loads(l) for l in open(path)]
mem = [r for r in recs if r.get("type") == "memory"]
psi = mem[0]["num_params"] if mem else 0
f = {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[zero]
ok = len(mem) == n
for r in mem:
    for k in ("params", "grads", "optimizer", "activations", "workspace", "comm"):
        ok &= k in r
    st = r["params"] + r["grads"] + r["optimizer"]
    ok &= abs(st - f) <= 0.05 * f
print("%s: memory N=%d ZeRO-%d: %d records, model state %s vs formula %.0f" %
      ("ok" if ok else "FAIL", n, zero, len(mem), [r["params"] + r["grads"] + r["optimizer"] for r in mem], f))
sys.exit(0 if ok else 1)
EOF
}

# run NAME RANKS DEVICES_PER_RANK POCL_COUNT args...
run() {
    name=$1; nr=$2; dpr=$3; npocl=$4; shift 4
    pd=$(for i in $(seq "$npocl"); do printf 'pthread '; done)
    if [ "$nr" -gt 1 ]; then
        POCL_DEVICES="$pd" "$MPIEXEC" -n "$nr" "$TRAIN" $ARGS --metrics "$D/$name.jsonl" "$@" \
            >"$D/$name.log" 2>&1
    else
        POCL_DEVICES="$pd" "$TRAIN" $ARGS --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1
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
    run t2 1 2 2 --dp 2 --devices-per-rank 2 && compare "$D/ref.jsonl" "$D/t2.jsonl" "threads 1x2 ZeRO-0" &&
        memcheck "$D/t2.jsonl" 2 0
    run t2z 1 2 2 --dp 2 --devices-per-rank 2 --zero 1 --overlap 0 &&
        compare "$D/ref.jsonl" "$D/t2z.jsonl" "threads 1x2 ZeRO-1 no overlap" &&
        memcheck "$D/t2z.jsonl" 2 1
    run t3z 1 3 3 --dp 3 --devices-per-rank 3 --zero 1 &&
        compare "$D/ref.jsonl" "$D/t3z.jsonl" "threads 1x3 ZeRO-1" && memcheck "$D/t3z.jsonl" 3 1
    run t2z2 1 2 2 --dp 2 --devices-per-rank 2 --zero 2 &&
        compare "$D/ref.jsonl" "$D/t2z2.jsonl" "threads 1x2 ZeRO-2" && memcheck "$D/t2z2.jsonl" 2 2
    run t2z3 1 2 2 --dp 2 --devices-per-rank 2 --zero 3 &&
        compare "$D/ref.jsonl" "$D/t2z3.jsonl" "threads 1x2 ZeRO-3" && memcheck "$D/t2z3.jsonl" 2 3
fi
if want ranks; then
    need_ref
    run r2 2 1 1 --dp 2 --overlap 0 && compare "$D/ref.jsonl" "$D/r2.jsonl" "ranks 2x1 ZeRO-0 no overlap"
    run r3z 3 1 1 --dp 3 --zero 1 && compare "$D/ref.jsonl" "$D/r3z.jsonl" "ranks 3x1 ZeRO-1" &&
        memcheck "$D/r3z.jsonl" 3 1
    run r4 4 1 1 --dp 4 && compare "$D/ref.jsonl" "$D/r4.jsonl" "ranks 4x1 ZeRO-0" &&
        memcheck "$D/r4.jsonl" 4 0
    run r3z2 3 1 1 --dp 3 --zero 2 && compare "$D/ref.jsonl" "$D/r3z2.jsonl" "ranks 3x1 ZeRO-2" &&
        memcheck "$D/r3z2.jsonl" 3 2
    run r3z3 3 1 1 --dp 3 --zero 3 && compare "$D/ref.jsonl" "$D/r3z3.jsonl" "ranks 3x1 ZeRO-3" &&
        memcheck "$D/r3z3.jsonl" 3 3
fi
if want mixed; then
    need_ref
    run m4 2 2 2 --dp 4 --devices-per-rank 2 &&
        compare "$D/ref.jsonl" "$D/m4.jsonl" "mixed 2x2 ZeRO-0"
    run m4z 2 2 2 --dp 4 --devices-per-rank 2 --zero 1 &&
        compare "$D/ref.jsonl" "$D/m4z.jsonl" "mixed 2x2 ZeRO-1" && memcheck "$D/m4z.jsonl" 4 1
    run m4z2 2 2 2 --dp 4 --devices-per-rank 2 --zero 2 &&
        compare "$D/ref.jsonl" "$D/m4z2.jsonl" "mixed 2x2 ZeRO-2" && memcheck "$D/m4z2.jsonl" 4 2
    run m4z3 2 2 2 --dp 4 --devices-per-rank 2 --zero 3 &&
        compare "$D/ref.jsonl" "$D/m4z3.jsonl" "mixed 2x2 ZeRO-3" && memcheck "$D/m4z3.jsonl" 4 3
    # ZeRO-3: sampling, evaluation and --save-model are collective (every forward gathers)
    if run m4z3s 2 2 2 --dp 4 --devices-per-rank 2 --zero 3 --steps 4 --sample-len 8 \
           --sample-every 2 --eval-every 2 --save-model "$D/z3model.bin"; then
        if grep -q "val loss" "$D/m4z3s.log" && grep -q -- "---- sample at step 2" "$D/m4z3s.log" &&
           [ -s "$D/z3model.bin" ]; then
            echo "ok: mixed 2x2 ZeRO-3 with sampling, evaluation and --save-model"
        else
            fail "ZeRO-3 sampling / evaluation / save-model output missing"; tail -n 5 "$D/m4z3s.log"
        fi
    fi
fi
if want resume; then
    need_ref
    # Written by 2 threads with ZeRO-1 (Adam state sharded), at step 10 ...
    if run w2 1 2 2 --dp 2 --devices-per-rank 2 --zero 1 --save "$D/ck" --save-every 10 --steps 20; then
        # ... resumed by 3 ranks with ZeRO-0, and by one device.
        run res3 3 1 1 --dp 3 --resume "$D/ck/ckpt_00000010.bin" &&
            compare "$D/ref.jsonl" "$D/res3.jsonl" "resume 1x2 ZeRO-1 -> 3x1 ZeRO-0" 10
        run res4 2 2 2 --dp 4 --devices-per-rank 2 --zero 2 --resume "$D/ck/ckpt_00000010.bin" &&
            compare "$D/ref.jsonl" "$D/res4.jsonl" "resume 1x2 ZeRO-1 -> 2x2 ZeRO-2" 10
        run res1 1 1 1 --resume "$D/ck/ckpt_00000010.bin" &&
            compare "$D/ref.jsonl" "$D/res1.jsonl" "resume 1x2 ZeRO-1 -> 1 device" 10
    fi
    if run w3 2 1 1 --dp 2 --zero 3 --save "$D/ck3" --save-every 10 --steps 20; then
        run res3z 1 1 1 --resume "$D/ck3/ckpt_00000010.bin" &&
            compare "$D/ref.jsonl" "$D/res3z.jsonl" "resume 2x1 ZeRO-3 -> 1 device" 10
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
        if [ $rc -eq 0 ]; then fail "$what: accepted"; return; fi
        if ! grep -qF -- "$msg" "$D/stderr"; then fail "$what: message lacks '$msg'"; cat "$D/stderr"; return; fi
        if [ -s "$D/bad.jsonl" ]; then fail "$what: metrics written (work started)"; return; fi
        rm -f "$D/bad.jsonl"
        echo "ok: refused $what (status $rc): $(grep -F -- "$msg" "$D/stderr" | head -n 1 | cut -c1-150)"
    }
    expect_bad "N not dividing the rows" "--dp 5 does not divide --batch 12" 1 2 --dp 5
    expect_bad "ZeRO without DP" "--zero 1 needs data parallelism" 1 1 --zero 1
    expect_bad "no ZeRO-4" "--zero must be 0, 1, 2 or 3" 1 2 --dp 2 --devices-per-rank 2 --zero 4
    expect_bad "more workers than devices" "more workers than devices" 1 2 --dp 3 --devices-per-rank 3
    expect_bad "--dp vs workers" "--dp 2 does not match the 1 workers" 1 1 --dp 2
    expect_bad "--dp vs ranks" "--dp 4 does not match the 2 workers" 2 1 --dp 4
fi

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all passed"
