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
#    is also run under four more limits, so the cuts fall between other tensors ("sweep",
#    labelled slow in tests/suites.cmake).
# 2. The memory model's "largest" (the largest single buffer, an arena part counted alone) is
#    exactly the least limit that runs: at it the model is built, 64 bytes below it the run is
#    refused naming it (the logits; a parameter slice). Refused with status 2 and a message,
#    before any step ("refuse"): a limit below one tensor of the arena (the message names it), a
#    negative --max-alloc-mb.
# 3. The model state (parameters, gradients, Adam's m and v: one array each, flat ranges) held
#    in pieces too ("state"), cut between (tensor, layer) slices: one device without clipping
#    gives BITWISE the one-buffer losses (the gradient norm, summed per piece, within 1e-5; also
#    at C 40, whose small slices are not whole 64-byte lines and are not cut apart);
#    with clipping on, one device, dp 2 with ZeRO 1, 2 and 3 (shards, working buffers, bucket
#    copies and gathers across pieces), tp 2 (owned-run norms), pp 2 (the tied wte) and
#    experts with ep 2 give the one-buffer losses within 1e-6 relative over 6 steps. Each cut
#    run's log says how many buffers hold the state, and its memory records equal the
#    predictions.
# part: "all" (default), "layouts", "sweep", "refuse", "state".
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
ARGS="--layers 4 --heads 4 --dim 32 --seq 16 --batch 8 --total-batch 256 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1"

# compare NAME TOL MIN_BUFFERS STEPS WHAT: NAME_one (one buffer) and NAME_cut (pieces) agree
# over STEPS steps: TOL 0 bitwise losses, else within TOL relative; the gradient norms bitwise
# for the arena ("arena": its grouping is the same) and within 1e-5 for the model state
# ("state": float sums of 0.2 M squares grouped per piece). NAME_cut's log reports WHAT held in
# at least MIN_BUFFERS buffers; its memory records equal the predictions.
compare() {
    if $PY - "$D/$1_one.jsonl" "$D/$1_cut.jsonl" "$D/$1_cut.log" "$@" <<'EOF'; then :; else fail "$1"; fi
import json, re, sys
def read(p):
    tr, mem = {}, {}
    for line in open(p):
        r = json.loads(line)
        if r.get("type") == "train": tr[r["step"]] = (r["loss"], r["grad_norm"])
        if r.get("type") == "memory": mem[r["worker"]] = r
    return tr, mem
(a, _), (b, mb) = read(sys.argv[1]), read(sys.argv[2])
what, tol, need, steps, kind = sys.argv[4], float(sys.argv[5]), int(sys.argv[6]), \
    int(sys.argv[7]), sys.argv[8]
rel = lambda x, y: abs(x - y) / max(abs(x), 1e-30)
ok, worst = len(a) == steps and sorted(a) == sorted(b), 0.0
for s in sorted(a):
    if s not in b: continue
    worst = max(worst, rel(a[s][0], b[s][0]))
    if (a[s][0] != b[s][0]) if tol == 0 else rel(a[s][0], b[s][0]) > tol: ok = False
    if (a[s][1] != b[s][1]) if kind == "arena" else rel(a[s][1], b[s][1]) > 1e-5: ok = False
if not ok:
    print("%s: the runs differ" % what)
    for s in sorted(a): print(" ", s, a[s], b.get(s))
pat = r"(?m)^\s+held in (\d+) device buffers" if kind == "arena" else \
    r"model state .* held in (\d+) device buffers"
held = [int(x) for x in re.findall(pat, open(sys.argv[3]).read())]
if not held or min(held) < need:
    print("%s: the %s was held in %s buffers, expected >= %d" % (what, kind, held, need))
    ok = False
if not mb: print("%s: no memory records" % what); ok = False
for w, r in sorted(mb.items()):
    p = r.get("predicted", {})
    for k in ("params", "grads", "optimizer", "activations", "workspace", "comm"):
        if p.get(k) != r[k]:
            print("%s worker %d: %s allocated %d, predicted %s" % (what, w, k, r[k], p.get(k)))
            ok = False
if ok:
    print("ok: %-16s %d steps, losses %s (largest difference %.1e), %s in %d-%d buffers" %
          (what, steps, "bitwise" if tol == 0 else "within %g" % tol, worst, kind, min(held),
           max(held)))
sys.exit(0 if ok else 1)
EOF
}
same() { compare "$1" 0 "$2" 10 arena; }

# pieces NAME MIN_PIECES LIMIT_MB RANKS DEVICES_PER_RANK ARGS...: the layout in one buffer and
# with the arena cut below LIMIT_MB.
pieces() {
    pn=$1 pmin=$2 plim=$3 pr=$4 pdpr=$5
    shift 5
    train "${pn}_one" "$pr" "$pdpr" "$@" &&
        train "${pn}_cut" "$pr" "$pdpr" --max-alloc-mb "$plim" "$@" &&
        same "$pn" "$pmin"
}

if want sweep; then
    # the cuts fall elsewhere under each limit: more of the arena's boundaries between pieces
    train gemm_one 1 1 --attention gemm
    for lim in 0.3 0.4 0.5 0.7; do
        train "gemm${lim}_cut" 1 1 --max-alloc-mb "$lim" --attention gemm &&
            cp "$D/gemm_one.jsonl" "$D/gemm${lim}_one.jsonl" && same "gemm$lim" 2
    done
fi
if want layouts; then
    pieces gemm 6 0.25 1 1 --attention gemm
    pieces gemm_block 4 0.25 1 1 --attention gemm --recompute block
    pieces fused_attention 4 0.25 1 1 --attention fused --recompute attention
    pieces tp2_sp 6 0.13 1 2 --tp 2 --sequence-parallel 1
    pieces tp2_shared 6 0.13 1 2 --tp 2 --sequence-parallel 1 --workers-per-device 2 \
        --tp-comm device && logsays "$D/tp2_shared_cut.log" "collectives on the device"
    pieces pp2_zb1 4 0.25 1 2 --pp 2 --schedule zb1
    pieces moe_ep2 4 0.25 1 2 --layers 2 --heads 2 --experts 4 --top-k 2 --capacity-factor 1.0 \
        --aux-loss 0.05 --dp 2 --ep 2
fi
if want state; then
    # state NAME TOL MIN_BUFFERS RANKS DEVICES_PER_RANK ARGS...: the layout with its model
    # state in one buffer each and cut below 0.2 MiB (a C 64 model's 0.8 MiB of parameters)
    state() {
        sn=$1 stol=$2 smin=$3 sr=$4 sdpr=$5
        shift 5
        train "${sn}_one" "$sr" "$sdpr" "$@" &&
            train "${sn}_cut" "$sr" "$sdpr" --max-alloc-mb 0.2 "$@" &&
            compare "$sn" "$stol" "$smin" 6 state
    }
    SARGS="--dim 64 --steps 6"
    state noclip 0 12 1 1 $SARGS --grad-clip 0
    # C 40: slices that are not whole 64-byte lines join the part before them
    state noclip40 0 2 1 1 $SARGS --dim 40 --grad-clip 0
    state one 1e-6 12 1 1 $SARGS
    state zero1 1e-6 8 2 1 $SARGS --dp 2 --zero 1
    state zero2 1e-6 8 2 1 $SARGS --dp 2 --zero 2
    state zero3 1e-6 8 1 2 $SARGS --dp 2 --zero 3
    state tp2 1e-6 8 1 2 $SARGS --tp 2
    state pp2 1e-6 6 1 2 $SARGS --pp 2
    state moe_ep2 1e-6 8 1 2 $SARGS --batch 4 --total-batch 128 --layers 2 --heads 2 \
        --experts 4 --top-k 2 --capacity-factor 1.0 --aux-loss 0.05 --dp 2 --ep 2
fi
if want refuse; then
    # the memory model's largest buffer is what must fit: a limit of exactly it runs, 64 bytes
    # less is refused naming it (the logits here, an arena part; with a short sequence and a
    # wide model a parameter slice, the first block's fcw: the model state is held in pieces too)
    for cfg in "logits|--layers 1 --dim 8 --heads 2 --batch 16 --seq 32 --total-batch 512" \
        "fcw_of_block_0|--layers 1 --dim 96 --heads 2 --batch 1 --seq 16 --total-batch 16"; do
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
            refused "below_$cname" "$(printf %s "$cname" | tr _ ' ')" 1 1 $cargs --steps 1 \
                --max-alloc-mb "$3"
        fi
    done
    # 0.05 MiB does not hold the logits (8 x 16 x Vp floats)
    refused part "its part 'the logits'" 1 1 --max-alloc-mb 0.05 --layers 1 --dim 8 --heads 1
    refused negative "--max-alloc-mb must be >= 0" 1 1 --max-alloc-mb -1
fi
finish
