#!/bin/sh
# test_engine_recompute.sh TRAIN_GPT MPIEXEC [part] - activation recomputation (issue 14)
# through train_gpt.
#
# 1. For each layout, --recompute attention and block give BITWISE the losses and gradient
#    norms of --recompute none over 10 steps (2 micro-batches, clipping on): one device on the
#    GEMM and the fused attention path ("single"); dp 2 as threads with ZeRO-1 and as ranks with
#    ZeRO-3 ("dp"); tp 2 with sequence parallelism as threads ("tp": the recomputed forward
#    repeats its collectives); pp 2 with 1F1B (per micro-batch) and zb1 (attention only: the
#    split backward refuses block) as threads ("pp").
# 2. In every run each worker's "memory" record carries the memory model's prediction, equal to
#    the bytes allocated in every category (device params, grads, optimizer, activations,
#    workspace; host comm staging); the activation bytes fall none > attention > block.
# 3. Refused with status 2 and a message before any work: an unknown mode, block with zb1,
#    attention with zb1 on the fused path ("refuse").
# part: "all" (default), "single", "dp", "tp", "pp", "refuse".
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
ARGS="--layers 4 --heads 4 --dim 32 --seq 16 --batch 8 --total-batch 256 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.03"

# same NONE OTHER WHAT: the losses and norms of every step identical as written (9 significant
# digits, which tell floats apart); the memory records' predictions equal what is allocated;
# OTHER's activations below NONE's.
same() {
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def read(p):
    tr, mem = {}, {}
    for line in open(p):
        r = json.loads(line)
        if r.get("type") == "train": tr[r["step"]] = (r["loss"], r["grad_norm"])
        if r.get("type") == "memory": mem[r["worker"]] = r
    return tr, mem
(a, ma), (b, mb), what = read(sys.argv[1]), read(sys.argv[2]), sys.argv[3]
ok = len(a) == 10 and a == b
if not ok:
    print("%s: losses differ" % what)
    for s in sorted(a): print(" ", s, a[s], b.get(s))
for name, m in (("none", ma), (what, mb)):
    if not m: print("%s: no memory records" % name); ok = False
    for w, r in sorted(m.items()):
        p = r.get("predicted", {})
        for k in ("params", "grads", "optimizer", "activations", "workspace", "comm"):
            if p.get(k) != r[k]:
                print("%s worker %d: %s allocated %d, predicted %s" % (name, w, k, r[k], p.get(k)))
                ok = False
act = lambda m: max(r["activations"] for r in m.values())
if ma and mb and not act(mb) < act(ma):
    print("%s: activations %d not below none's %d" % (what, act(mb), act(ma))); ok = False
if ok:
    print("ok: %-44s 10 steps bitwise (loss %.6f -> %.6f), %d workers predicted == allocated, "
          "activations %d -> %d bytes (%.2fx)" % (what, b[0][0], b[9][0], len(mb), act(ma),
          act(mb), act(ma) / act(mb)))
sys.exit(0 if ok else 1)
EOF
}

# modes NAME RANKS DEVICES_PER_RANK ARGS...: none, attention and block (or those given in MODES).
modes() {
    mn=$1 mr=$2 mdpr=$3
    shift 3
    train "${mn}_none" "$mr" "$mdpr" --recompute none "$@" || return
    for m in ${MODES:-attention block}; do
        train "${mn}_$m" "$mr" "$mdpr" --recompute "$m" "$@" &&
            same "${mn}_none" "${mn}_$m" "$mn --recompute $m"
    done
}

if want single; then
    modes gemm 1 1
    modes fused 1 1 --attention fused
fi
if want dp; then
    modes dp2_threads_z1 1 2 --dp 2 --zero 1
    MODES=block modes dp2_ranks_z3 2 1 --dp 2 --zero 3
fi
if want tp; then
    modes tp2_sp 1 2 --tp 2 --sequence-parallel 1
fi
if want pp; then
    modes pp2_1f1b 1 2 --pp 2 --schedule 1f1b
    MODES=attention modes pp2_zb1 1 2 --pp 2 --schedule zb1
fi
if want refuse; then
    refused mode "--recompute must be none, attention or block" 1 2 --recompute blocks
    refused zb1_block "split backward" 1 2 --recompute block --pp 2 --devices-per-rank 2 \
        --schedule zb1
    refused zb1_fused "drop nothing" 1 2 --recompute attention --attention fused --pp 2 \
        --devices-per-rank 2 --schedule zb1
fi
finish
