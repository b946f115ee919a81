#!/bin/sh
# test_engine_dp.sh TRAIN_GPT MPIEXEC [part] - data parallelism (issue 5) through train_gpt.
#
# 1. Every layout trains the same global batch as one device: DP (ZeRO-0, 1, 2, 3) over N = 2,
#    3 and 4 workers as threads (--devices-per-rank), as MPI ranks and mixed, with gradient
#    accumulation (2 micro-batches) and clipping on (--grad-clip below the norms), overlap on and
#    off, small buckets (several per step): the 10 losses match the single-device run within
#    1e-5 relative.
# 2. The "memory" records (one per worker) give model-state bytes within 5 % of the ZeRO
#    formulas (16 Psi; 8 Psi + 8 Psi / N; 4 Psi + 12 Psi / N; 16 Psi / N); the "train" records'
#    comm_dp_bytes the traffic formulas (bytescheck).
# 3. A checkpoint written under one layout (2 threads, ZeRO-1) resumes under another (3 ranks,
#    ZeRO-0; 2x2 ZeRO-2; 1 device), and one written by 2 ranks with ZeRO-3 resumes on 1 device,
#    continuing the single-device loss curve. Under ZeRO-3 sampling, evaluation and --save-model
#    (collective there) run without hanging.
# 4. Impossible layouts are refused with status 2 and a message before any work.
# 5. Each group's bytes per step apart (dp x pp: DP and the tied wte's group; dp (ep): DP, the
#    experts' DP group, EP) against the formulas.
# part: "all" (default), "threads" (ZeRO 0-3 over 2 and 3 threads), "axes" (5.), "ranks" (the same over
# ranks: a transport repeat, tests/suites.cmake labels it slow), "mixed" (ZeRO 0-2 over 2 x 2),
# "zero3" (ZeRO-3 over 2 x 2 with sampling, evaluation and --save-model, and its checkpoint
# written by 2 ranks resumed on one device: DP's one layout in the sanitizer pass), "resume",
# "refuse".
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 12 --total-batch 384 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.03"

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

# workcheck Z1 Z2 N: ZeRO-2's gradient working buffer ([wte's window | wpe | 2 block slots | lnf]:
# wte's gradient produced window by window, ceil(Vp/N) rows, not whole) is what ZeRO-2's records
# add to ZeRO-1's workspace on every worker, predicted == allocated: (Vp C)(1 - 1/N) floats less
# than a whole wte would take.
workcheck() {
    if $PY - "$1" "$2" "$3" <<'EOF'; then :; else fail "ZeRO-2 working buffer $2"; fi
import json, sys
a, b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def mem(p):
    return {r["worker"]: r for r in map(json.loads, open(p)) if r.get("type") == "memory"}
z1, z2 = mem(a), mem(b)
C, L, T, Vp = 32, 2, 16, 256  # this script's model (text: V 256)
S = 12 * C * C + 13 * C
want = 4 * (-(-Vp // n) * C + T * C + 2 * S + 2 * C)
got = sorted(set(z2[w]["workspace"] - z1[w]["workspace"] for w in z2))
ok = len(z1) == n and sorted(z1) == sorted(z2) and got == [want]
ok &= all(r["workspace"] == r["predicted"]["workspace"] for r in z2.values())
print("%s: ZeRO-2 N=%d: gradient working buffer %s bytes, formula %d (wte whole: %d)" %
      ("ok" if ok else "FAIL", n, got, want, want + 4 * (Vp * C - -(-Vp // n) * C)))
sys.exit(0 if ok else 1)
EOF
}

# bytescheck FILE N ZERO: the leader's "comm_dp_bytes" in every train record within 2 % of the
# formula for N workers, P parameters, M = 2 micro-steps and 2 layers (P (N-1)/N units: DDP and
# ZeRO-1 2, ZeRO-2 M + 1 (every micro-step's reduce-scatter), ZeRO-3 2M (reduce-scatter and the
# forward's gathers) plus, per micro-step, what the leader (DP rank 0, the shard at the start)
# gathers again: wte for the head (it shares the working buffer with the block slots) and block
# 0, whose slot the head's wte took, in the backward; no other group's field on a DP-only
# layout. test_engine_zero_bytes checks the exact counts.
bytescheck() {
    if $PY - "$1" "$2" "$3" <<'EOF'; then :; else fail "bytes in $1"; fi
import json, sys
path, n, zero = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
recs = [json.loads(l) for l in open(path)]
psi = [r for r in recs if r.get("type") == "memory"][0]["num_params"]
M = 2
units = {0: 2, 1: 2, 2: M + 1, 3: 2 * M}[zero]
want = units * psi * (n - 1) / n * 4
if zero == 3:  # this script's --dim 32 --layers 2 --seq 16: [wte | wpe | block 0 | block 1 | lnf]
    C, L, T = 32, 2, 16
    S, E = 12 * C * C + 13 * C, T * C
    W, sh = psi - L * S - 2 * C - E, -(-psi // n)
    assert 0 < W <= S, (W, S)  # wte fits slot 0: block 1 stays in slot 1
    def others(a, b): return (b - a) - max(0, min(b, sh) - max(a, 0))
    want += 4 * M * (others(0, W) + others(W + E, W + E + S))
tr = [r for r in recs if r.get("type") == "train"]
got = [r.get("comm_dp_bytes", -1) for r in tr]
ok = len(tr) > 0 and all(abs(g - want) <= 0.02 * want for g in got)
ok &= not any(k in r for r in tr for k in ("comm_tp_bytes", "comm_ep_bytes", "comm_emb_bytes"))
print("%s: bytes N=%d ZeRO-%d: comm_dp_bytes %s vs formula %.0f (%d x P(N-1)/N)" %
      ("ok" if ok else "FAIL", n, zero, sorted(set(got)), want, units))
sys.exit(0 if ok else 1)
EOF
}

if want threads; then
    need_ref
    train t2 1 2 --dp 2 && compare "$D/ref.jsonl" "$D/t2.jsonl" "threads 1x2 ZeRO-0" &&
        memcheck "$D/t2.jsonl" 2 0 && bytescheck "$D/t2.jsonl" 2 0
    train t2z 1 2 --dp 2 --zero 1 --overlap 0 &&
        compare "$D/ref.jsonl" "$D/t2z.jsonl" "threads 1x2 ZeRO-1 no overlap" &&
        memcheck "$D/t2z.jsonl" 2 1 && bytescheck "$D/t2z.jsonl" 2 1
    train t3z 1 3 --dp 3 --zero 1 &&
        compare "$D/ref.jsonl" "$D/t3z.jsonl" "threads 1x3 ZeRO-1" && memcheck "$D/t3z.jsonl" 3 1 &&
        bytescheck "$D/t3z.jsonl" 3 1
    train t2z2 1 2 --dp 2 --zero 2 &&
        compare "$D/ref.jsonl" "$D/t2z2.jsonl" "threads 1x2 ZeRO-2" && memcheck "$D/t2z2.jsonl" 2 2 &&
        bytescheck "$D/t2z2.jsonl" 2 2 && workcheck "$D/t2z.jsonl" "$D/t2z2.jsonl" 2
    # wte's gradient windows over a TP slice of the vocabulary, and with the head in chunks
    train t22z2 1 4 --dp 2 --tp 2 --zero 2 &&
        compare "$D/ref.jsonl" "$D/t22z2.jsonl" "threads dp 2 x tp 2 ZeRO-2"
    train t2z2c 1 2 --dp 2 --zero 2 --loss-chunk 64 &&
        compare "$D/ref.jsonl" "$D/t2z2c.jsonl" "threads 1x2 ZeRO-2, loss chunks of 64"
    train t2z3 1 2 --dp 2 --zero 3 &&
        compare "$D/ref.jsonl" "$D/t2z3.jsonl" "threads 1x2 ZeRO-3" && memcheck "$D/t2z3.jsonl" 2 3 &&
        bytescheck "$D/t2z3.jsonl" 2 3
fi
if want ranks; then
    need_ref
    train r2 2 1 --dp 2 --overlap 0 && compare "$D/ref.jsonl" "$D/r2.jsonl" "ranks 2x1 ZeRO-0 no overlap"
    train r3z 3 1 --dp 3 --zero 1 && compare "$D/ref.jsonl" "$D/r3z.jsonl" "ranks 3x1 ZeRO-1" &&
        memcheck "$D/r3z.jsonl" 3 1
    train r4 4 1 --dp 4 && compare "$D/ref.jsonl" "$D/r4.jsonl" "ranks 4x1 ZeRO-0" &&
        memcheck "$D/r4.jsonl" 4 0
    train r3z2 3 1 --dp 3 --zero 2 && compare "$D/ref.jsonl" "$D/r3z2.jsonl" "ranks 3x1 ZeRO-2" &&
        memcheck "$D/r3z2.jsonl" 3 2 && workcheck "$D/r3z.jsonl" "$D/r3z2.jsonl" 3
    train r3z3 3 1 --dp 3 --zero 3 && compare "$D/ref.jsonl" "$D/r3z3.jsonl" "ranks 3x1 ZeRO-3" &&
        memcheck "$D/r3z3.jsonl" 3 3
fi
if want mixed; then
    need_ref
    train m4 2 2 --dp 4 &&
        compare "$D/ref.jsonl" "$D/m4.jsonl" "mixed 2x2 ZeRO-0"
    train m4z 2 2 --dp 4 --zero 1 &&
        compare "$D/ref.jsonl" "$D/m4z.jsonl" "mixed 2x2 ZeRO-1" && memcheck "$D/m4z.jsonl" 4 1
    train m4z2 2 2 --dp 4 --zero 2 &&
        compare "$D/ref.jsonl" "$D/m4z2.jsonl" "mixed 2x2 ZeRO-2" && memcheck "$D/m4z2.jsonl" 4 2 &&
        workcheck "$D/m4z.jsonl" "$D/m4z2.jsonl" 4
fi
if want zero3; then
    need_ref
    train m4z3 2 2 --dp 4 --zero 3 &&
        compare "$D/ref.jsonl" "$D/m4z3.jsonl" "mixed 2x2 ZeRO-3" && memcheck "$D/m4z3.jsonl" 4 3
    # ZeRO-3: sampling, evaluation and --save-model are collective (every forward gathers)
    if train m4z3s 2 2 --dp 4 --zero 3 --steps 4 --sample-len 8 \
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
    # Written by 2 threads with ZeRO-1 (Adam state sharded), at step 5 ...
    if train w2 1 2 --dp 2 --zero 1 --save "$D/ck" --save-every 5 --steps 10; then
        # ... resumed by 3 ranks with ZeRO-0, and by one device.
        train res3 3 1 --dp 3 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/ref.jsonl" "$D/res3.jsonl" "resume 1x2 ZeRO-1 -> 3x1 ZeRO-0" 5
        train res4 2 2 --dp 4 --zero 2 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/ref.jsonl" "$D/res4.jsonl" "resume 1x2 ZeRO-1 -> 2x2 ZeRO-2" 5
        train res1 1 1 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/ref.jsonl" "$D/res1.jsonl" "resume 1x2 ZeRO-1 -> 1 device" 5
    fi
fi
if want zero3; then
    if train w3 2 1 --dp 2 --zero 3 --save "$D/ck3" --save-every 5 --steps 10; then
        train res3z 1 1 --resume "$D/ck3/ckpt_00000005.bin" &&
            compare "$D/ref.jsonl" "$D/res3z.jsonl" "resume 2x1 ZeRO-3 -> 1 device" 5
    fi
fi
if want axes; then
    # each group's bytes apart, against the formulas (ZeRO-1, exact up to the step's scalars and
    # the shards' padding): dp 2 x pp 2 (the first stage's DP share 2 P_stage (N-1)/N, the tied
    # wte's all-reduce over the embedding group Vp C) and dp 4 (ep 2) with experts (the
    # experts' share over their expert-data-parallel group of 2: 2 P_experts (2-1)/2; the dense
    # share over DP 2 P_dense (N-1)/N; the all-to-alls over EP counted)
    need_ref
    train ax_pp 1 4 --dp 2 --pp 2 --zero 1 &&
        compare "$D/ref.jsonl" "$D/ax_pp.jsonl" "threads dp 2 x pp 2 ZeRO-1"
    train ax_ep 1 4 --dp 4 --ep 2 --experts 4 --top-k 2 --zero 1
    if $PY - "$D/ax_pp.jsonl" "$D/ax_ep.jsonl" <<'EOF'; then :; else fail "bytes per axis"; fi
import json, sys
def load(path):
    recs = [json.loads(l) for l in open(path)]
    cfg = [r for r in recs if r.get("type") == "config"][0]
    mem = [r for r in recs if r.get("type") == "memory" and r["worker"] == 0][0]
    return cfg, mem, [r for r in recs if r.get("type") == "train"]
ok, said = True, set()
def near(what, got, want):  # every record checked, the first (and any failure) printed
    global ok
    good = abs(got - want) <= 32 + 1e-3 * want
    ok &= good
    if not good or what not in said:
        print("%s: %s %d bytes vs formula %.0f" % ("ok" if good else "FAIL", what, got, want))
    said.add(what)
cfg, mem, tr = load(sys.argv[1])
for r in tr:
    near("dp 2 x pp 2 comm_dp_bytes", r.get("comm_dp_bytes", -1), 2 * mem["stage_params"] * 0.5 * 4)
    near("dp 2 x pp 2 comm_emb_bytes", r.get("comm_emb_bytes", -1), cfg["vocab"] * cfg["dim"] * 4)
cfg, mem, tr = load(sys.argv[2])
for r in tr:
    near("dp 4 (ep 2) comm_dp_bytes", r.get("comm_dp_bytes", -1), 2 * mem["psi_tp"] * 0.75 * 4)
    near("dp 4 (ep 2) comm_edp_bytes", r.get("comm_edp_bytes", -1), 2 * mem["psi_experts"] * 0.5 * 4)
    ok &= r.get("comm_ep_bytes", 0) > 0 and "comm_emb_bytes" not in r
sys.exit(0 if ok and tr else 1)
EOF
fi
if want refuse; then
    refused "N not dividing the rows" "--dp 5 does not divide --batch 12" 1 2 --dp 5
    refused "ZeRO without DP" "--zero 1 needs data parallelism" 1 1 --zero 1
    refused "no ZeRO-4" "--zero must be 0, 1, 2 or 3" 1 2 --dp 2 --devices-per-rank 2 --zero 4
    refused "more workers than devices" "more workers than devices" 1 2 --dp 3 --devices-per-rank 3
    refused "--dp vs workers" "--dp 2 does not match the 1 workers" 1 1 --dp 2
    refused "--dp vs ranks" "--dp 4 does not match the 2 workers" 2 1 --dp 4
fi

finish
