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
set -u
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}
D=$(mktemp -d /tmp/ct_test_recompute.XXXXXX)
trap 'rm -rf "$D"' EXIT
PY=/usr/bin/python3
export OMP_WAIT_POLICY=passive
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

$PY -c "open('$D/text.txt','w').write('the quick brown fox jumps over the lazy dog. ' * 300)"
ARGS="--layers 4 --heads 4 --dim 32 --seq 16 --batch 8 --total-batch 256 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.03"

# run NAME RANKS "POCL_DEVICES" ARGS...: train_gpt (under mpiexec when RANKS > 1).
run() {
    name=$1 nr=$2 pd=$3
    shift 3
    if [ "$nr" -gt 1 ]; then
        POCL_DEVICES="$pd" "$MPIEXEC" -n "$nr" "$TRAIN" $ARGS --metrics "$D/$name.jsonl" "$@" \
            >"$D/$name.log" 2>&1
    else
        POCL_DEVICES="$pd" "$TRAIN" $ARGS --metrics "$D/$name.jsonl" "$@" >"$D/$name.log" 2>&1
    fi
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$name: exit $rc"; tail -5 "$D/$name.log"; return 1
    fi
    return 0
}

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

# modes NAME RANKS "POCL_DEVICES" ARGS...: none, attention and block (or those given in MODES).
modes() {
    mn=$1 mr=$2 mpd=$3
    shift 3
    run "${mn}_none" "$mr" "$mpd" --recompute none "$@" || return
    for m in ${MODES:-attention block}; do
        run "${mn}_$m" "$mr" "$mpd" --recompute "$m" "$@" &&
            same "${mn}_none" "${mn}_$m" "$mn --recompute $m"
    done
}

if want single; then
    modes gemm 1 pthread
    modes fused 1 pthread --attention fused
fi
if want dp; then
    modes dp2_threads_z1 1 "pthread pthread" --dp 2 --devices-per-rank 2 --zero 1
    MODES=block modes dp2_ranks_z3 2 pthread --dp 2 --zero 3
fi
if want tp; then
    modes tp2_sp 1 "pthread pthread" --tp 2 --devices-per-rank 2 --sequence-parallel 1
fi
if want pp; then
    modes pp2_1f1b 1 "pthread pthread" --pp 2 --devices-per-rank 2 --schedule 1f1b
    MODES=attention modes pp2_zb1 1 "pthread pthread" --pp 2 --devices-per-rank 2 --schedule zb1
fi
if want refuse; then
    # refused NAME "message part" ARGS...: status 2, the message, no metrics written
    refused() {
        name=$1 msg=$2
        shift 2
        POCL_DEVICES="pthread pthread" "$TRAIN" $ARGS --metrics "$D/$name.jsonl" "$@" \
            >"$D/$name.log" 2>&1
        rc=$?
        if [ $rc -ne 2 ] || ! grep -q -- "$msg" "$D/$name.log" || [ -s "$D/$name.jsonl" ]; then
            fail "$name: exit $rc (want 2) with '$msg'"; cat "$D/$name.log"
        else
            echo "ok: refused $name: $(grep -- "$msg" "$D/$name.log" | head -1 | cut -c1-150)"
        fi
    }
    refused mode "--recompute must be none, attention or block" --recompute blocks
    refused zb1_block "split backward" --recompute block --pp 2 --devices-per-rank 2 --schedule zb1
    refused zb1_fused "drop nothing" --recompute attention --attention fused --pp 2 \
        --devices-per-rank 2 --schedule zb1
fi
[ $fails -eq 0 ] && echo "test_engine_recompute ($PART): all passed" || echo "test_engine_recompute ($PART): $fails failed"
exit $((fails > 0))
