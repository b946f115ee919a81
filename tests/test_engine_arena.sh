#!/bin/sh
# test_engine_arena.sh TRAIN_GPT MPIEXEC [part] - the activation arena held in several device
# buffers when one would exceed the device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE,
# lowered here with --max-alloc-mb so that a tiny model's arena is cut into many pieces).
#
# 1. Each layout run with the arena in pieces gives BITWISE the losses and gradient norms of the
#    same layout in one buffer over 10 steps (2 micro-batches, clipping on), its start-up report
#    says how many buffers hold the arena (at least the number asked), and every worker's memory
#    record equals the memory model's prediction (pieces add up to the planned arena). Layouts
#    ("layouts"): one device on the GEMM path (recompute none and block) and the fused path
#    (recompute attention); tp 2 with sequence parallelism on two devices (host-staged TP reads
#    and writes pieces) and on one device shared by two workers (the device path's kernels read
#    the peer's pieces); pp 2 with zb1 (the split backward's weight-gradient region; stage
#    transfers); experts with ep 2 (the MoE layer's reads and writes of the arena). One device
#    is also run under four more limits, so the cuts fall between other tensors.
# 2. The memory model's "largest" (the largest single buffer, an arena part counted alone) is
#    exactly the least limit that runs: at it the model is built, 64 bytes below it the run is
#    refused naming it (the logits; the parameters). Refused with status 2 and a message, before
#    any step ("refuse"): a limit below one tensor of the arena (the message names it), a limit
#    below the parameters (a single buffer), a negative --max-alloc-mb.
# part: "all" (default), "layouts", "refuse".
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
ARGS="--layers 4 --heads 4 --dim 32 --seq 16 --batch 8 --total-batch 256 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1"

# same NAME MIN_PIECES: NAME_one (one buffer) and NAME_cut (pieces) agree bitwise, NAME_cut's
# log reports at least MIN_PIECES buffers, its memory records equal the predictions.
same() {
    if $PY - "$D/$1_one.jsonl" "$D/$1_cut.jsonl" "$D/$1_cut.log" "$1" "$2" <<'EOF'; then :; else fail "$1"; fi
import json, re, sys
def read(p):
    tr, mem = {}, {}
    for line in open(p):
        r = json.loads(line)
        if r.get("type") == "train": tr[r["step"]] = (r["loss"], r["grad_norm"])
        if r.get("type") == "memory": mem[r["worker"]] = r
    return tr, mem
(a, _), (b, mb) = read(sys.argv[1]), read(sys.argv[2])
what, need = sys.argv[4], int(sys.argv[5])
ok = len(a) == 10 and a == b
if not ok:
    print("%s: losses differ" % what)
    for s in sorted(a): print(" ", s, a[s], b.get(s))
pieces = [int(x) for x in re.findall(r"held in (\d+) device buffers", open(sys.argv[3]).read())]
if not pieces or min(pieces) < need:
    print("%s: the arena was held in %s buffers, expected >= %d" % (what, pieces, need))
    ok = False
if not mb: print("%s: no memory records" % what); ok = False
for w, r in sorted(mb.items()):
    p = r.get("predicted", {})
    for k in ("params", "grads", "optimizer", "activations", "workspace", "comm"):
        if p.get(k) != r[k]:
            print("%s worker %d: %s allocated %d, predicted %s" % (what, w, k, r[k], p.get(k)))
            ok = False
if ok:
    print("ok: %-34s 10 steps bitwise (loss %.6f -> %.6f), arena in %d-%d buffers" %
          (what, b[0][0], b[9][0], min(pieces), max(pieces)))
sys.exit(0 if ok else 1)
EOF
}

# pieces NAME MIN_PIECES LIMIT_MB RANKS DEVICES_PER_RANK ARGS...: the layout in one buffer and
# with the arena cut below LIMIT_MB.
pieces() {
    pn=$1 pmin=$2 plim=$3 pr=$4 pdpr=$5
    shift 5
    train "${pn}_one" "$pr" "$pdpr" "$@" &&
        train "${pn}_cut" "$pr" "$pdpr" --max-alloc-mb "$plim" "$@" &&
        same "$pn" "$pmin"
}

if want layouts; then
    pieces gemm 6 0.25 1 1 --attention gemm
    # the cuts fall elsewhere under each limit: more of the arena's boundaries between pieces
    for lim in 0.3 0.4 0.5 0.7; do
        train "gemm${lim}_cut" 1 1 --max-alloc-mb "$lim" --attention gemm &&
            cp "$D/gemm_one.jsonl" "$D/gemm${lim}_one.jsonl" && same "gemm$lim" 2
    done
    pieces gemm_block 4 0.25 1 1 --attention gemm --recompute block
    pieces fused_attention 4 0.25 1 1 --attention fused --recompute attention
    pieces tp2_sp 6 0.13 1 2 --tp 2 --sequence-parallel 1
    pieces tp2_shared 6 0.13 1 2 --tp 2 --sequence-parallel 1 --workers-per-device 2 \
        --tp-comm device && logsays "$D/tp2_shared_cut.log" "collectives on the device"
    pieces pp2_zb1 4 0.25 1 2 --pp 2 --schedule zb1
    pieces moe_ep2 4 0.25 1 2 --layers 2 --heads 2 --experts 4 --top-k 2 --capacity-factor 1.0 \
        --aux-loss 0.05 --dp 2 --ep 2
fi
if want refuse; then
    # the memory model's largest buffer is what must fit: a limit of exactly it runs, 64 bytes
    # less is refused naming it (the logits here, an arena part; the parameters by default)
    for cfg in "logits|--layers 1 --dim 8 --heads 2 --batch 16 --seq 32 --total-batch 512" "params|"; do
        cname=${cfg%%|*} cargs=${cfg#*|}
        if train "big_$cname" 1 1 $cargs --steps 1; then
            lim=$($PY -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '\"memory\"' in l][0]['predicted']
print('%s %r %r' % (r['largest_name'].replace(' ', '_'), r['largest'] / 1048576,
                    (r['largest'] - 64) / 1048576))" "$D/big_$cname.jsonl")
            set -- $lim
            case "$1" in *"$cname"*) echo "ok: $cname: predicted largest buffer '$1'" ;;
                *) fail "$cname: predicted largest buffer '$1'" ;; esac
            train "fit_$cname" 1 1 $cargs --steps 1 --max-alloc-mb "$2"
            refused "below_$cname" "$cname" 1 1 $cargs --steps 1 --max-alloc-mb "$3"
        fi
    done
    # 0.25 MiB holds the parameters; 0.05 MiB does not hold the logits (8 x 16 x Vp floats)
    refused part "its part 'the logits'" 1 1 --max-alloc-mb 0.05 --layers 1 --dim 8 --heads 1
    refused params "exceed the largest single allocation" 1 1 --max-alloc-mb 0.1
    refused negative "--max-alloc-mb must be >= 0" 1 1 --max-alloc-mb -1
fi
finish
