#!/bin/sh
# test_engine_zero_sched.sh TRAIN_GPT MPIEXEC [part] - ZeRO-2 and 3 with the schedules whose
# backwards interleave (issue 30): dp 2 x pp 2 with the interleaved schedule (v 2: each worker
# holds two chunks) and with zb1 (the weight halves deferred behind later input halves), each
# with ZeRO-2 and ZeRO-3, train the same global batch as one device for 20 steps: the losses
# within 1e-5 relative, every step clipped (so the global norm from the shards decides each
# update). Four micro-batches; 8 blocks (4 a worker: they reuse the two working slots; the
# interleaved schedule's chunks alternate on them) and, for ZeRO-3 with zb1, 4. Before the
# gradient pieces left as each action wrote them (grads.c), both interleaved runs failed here.
# Also dp 2 x tp 2 with SP and ZeRO-2 on 4 blocks (no pipeline).
# part: "threads" (one process, 4 devices), "ranks" (4 processes), "all" (both).
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
ARGS="--heads 2 --dim 32 --seq 16 --batch 4 --total-batch 256 --steps 20 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.03"
CMP_ALL_CLIPPED=1

# layout NAME RANKS DPR REF what args...
layout() {
    name=$1; nr=$2; dpr=$3; ref=$4; what=$5; shift 5
    train "$name" "$nr" "$dpr" "$@" && compare "$D/$ref.jsonl" "$D/$name.jsonl" "$what"
}

ZB="--dp 2 --pp 2 --schedule zb1"
IL="--dp 2 --pp 2 --schedule interleaved --virtual-stages 2"
if want threads ranks; then
    need_ref ref4 --layers 4
    need_ref ref8 --layers 8
fi
if want threads; then
    layout t_z2zb 1 4 ref8 "threads dp 2 x pp 2 ZeRO-2 zb1" --layers 8 $ZB --zero 2
    layout t_z3il 1 4 ref8 "threads dp 2 x pp 2 ZeRO-3 interleaved" --layers 8 $IL --zero 3
    layout t_z3zb 1 4 ref4 "threads dp 2 x pp 2 ZeRO-3 zb1" --layers 4 $ZB --zero 3
    layout t_z2il 1 4 ref8 "threads dp 2 x pp 2 ZeRO-2 interleaved" --layers 8 $IL --zero 2
    # SP's LayerNorm gradients (a second group, TP) inside blocks that share the two slots: they
    # leave every micro-step too (before this change they waited for the last one, summed with
    # the other block's of their slot: 8e-5 off here); 4 heads, 2 micro-batches
    need_ref refsp --layers 4 --heads 4 --total-batch 128
    layout t_z2sp 1 4 refsp "threads dp 2 x tp 2 SP ZeRO-2, 4 blocks" --layers 4 --heads 4 \
        --total-batch 128 --dp 2 --tp 2 --sequence-parallel 1 --zero 2
fi
if want ranks; then
    layout r_z2zb 4 1 ref8 "ranks dp 2 x pp 2 ZeRO-2 zb1" --layers 8 $ZB --zero 2
    layout r_z3il 4 1 ref8 "ranks dp 2 x pp 2 ZeRO-3 interleaved" --layers 8 $IL --zero 3
fi
finish
