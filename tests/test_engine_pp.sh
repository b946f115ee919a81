#!/bin/sh
# test_engine_pp.sh TRAIN_GPT MPIEXEC [part] - pipeline parallelism (issue 10) through train_gpt.
#
# 1. Every pipeline layout trains the same global batch as one device: pp = 2, 3 and 4 with each
#    schedule (gpipe, 1f1b, zb1, interleaved at v = 2), as threads (--devices-per-rank), as MPI
#    ranks and mixed, with 4 micro-batches of gradient accumulation (6 for pp 3 interleaved: a
#    multiple of the stages) and clipping on
#    (--grad-clip below every step's norm, so the global norm over the stages is used): the 10
#    losses match the single-device run within 1e-5 relative. dp 2 x pp 2 with ZeRO-1 (and
#    ZeRO-2, ZeRO-3 under gpipe / 1f1b) too.
# 2. The start-up report shows the split and each stage's activation slots (the schedule's peak,
#    not the micro-batch count); the "memory" records give the slots; the end of the run prints
#    the measured bubble per stage beside the simulated one (a "pipeline" record).
# 3. A checkpoint written at pp = 4 (step 5) resumes at pp = 1, pp = 2 and dp 2 x pp 2, continuing
#    the single-device loss curve; sampling, evaluation and --save-model run through the stages.
# 4. --trace on a pipeline: every stage's actions (forward, backward, sends, receives).
# 5. Impossible layouts and flags are refused with status 2 and a message before any work.
# part: "all" (default), "threads" (with trace and refuse), "ranks", "mixed" (with resume),
# "resume", "trace", "refuse" alone, "zb1" (pp 4 with zb1 over 2 ranks x 2 threads with sampling,
# evaluation and --save-model against one device: the pipeline's one layout in the sanitizer
# pass), "repeats" (gpipe, 1f1b and zb1 again over ranks, which the threads part runs: schedules
# are validated as data and the mixed and zb1 parts cross ranks; tests/suites.cmake labels it
# slow).
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
# micro-batches of 4 rows x 16 tokens: 4 of them (--total-batch 256) but for pp 3 interleaved (6)
ARGS="--heads 2 --dim 32 --seq 16 --batch 4 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.03"
# compare: the losses within 1e-5 relative, and every step clipped (so the global norm over the
# stages decides each update)
CMP_ALL_CLIPPED=1

# run NAME RANKS DEVICES_PER_RANK args...: lib.sh's train, and how long it took.
run() {
    t0=$(date +%s)
    train "$@"
    rc=$?
    echo "   ($1: $2 x $3 workers, $(($(date +%s) - t0)) s)"
    return $rc
}

# The references: one device; 4 blocks and 4 micro-batches; more blocks for interleaved runs
# with v x pp chunks (6 blocks x 6 micro-batches for pp 3, 8 x 4 for pp 4).
M4="--total-batch 256"
REF="ref --layers 4 $M4"
REF6="ref6 --layers 6 --total-batch 384"
REF8="ref8 --layers 8 $M4"

# layout NAME RANKS DPR REF what args...
layout() {
    name=$1; nr=$2; dpr=$3; ref=$4; what=$5; shift 5
    run "$name" "$nr" "$dpr" "$@" && compare "$D/$ref.jsonl" "$D/$name.jsonl" "$what"
}

if want threads; then
    need_ref $REF
    layout t2g 1 2 ref "threads pp 2 gpipe" $M4 --layers 4 --pp 2 --schedule gpipe
    layout t3f 1 3 ref "threads pp 3 1f1b" $M4 --layers 4 --pp 3 --schedule 1f1b
    layout t4z 1 4 ref "threads pp 4 zb1" $M4 --layers 4 --pp 4 --schedule zb1
    layout t2f 1 2 ref "threads pp 2 1f1b" $M4 --layers 4 --pp 2 --schedule 1f1b
    layout t4d 1 4 ref "threads dp 2 x pp 2 ZeRO-2 gpipe" $M4 --layers 4 --dp 2 --pp 2 --zero 2 \
        --schedule gpipe
    # the report: the FLOP-balanced split, the slots of 1F1B (min(N - s, m)), the measured bubble
    if [ -f "$D/t3f.log" ]; then
        if grep -q "blocks per stage 1,2,1 (balanced by FLOPs" "$D/t3f.log" &&
           grep -q "activation slots per stage 3,2,1" "$D/t3f.log" &&
           grep -q "stage 2: measured 0\.[0-9]*  simulated 0\." "$D/t3f.log" &&
           $PY - "$D/t3f.jsonl" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
mem = sorted((r["stage"], r["slots"]) for r in recs if r.get("type") == "memory")
pipe = [r for r in recs if r.get("type") == "pipeline"]
ok = mem == [(0, 3), (1, 2), (2, 1)] and len(pipe) == 1 and pipe[0]["stages"] == 3
ok = ok and len(pipe[0]["stage_measured"]) == 3 and 0 <= pipe[0]["bubble_measured"] < 1
ok = ok and abs(pipe[0]["bubble_unit"] - 2.0 / 6.0) < 1e-4    # (N-1)/(m+N-1), m 4
print(mem, pipe[0] if pipe else None)
sys.exit(0 if ok else 1)
EOF
        then echo "ok: pp 3 report: split 1,2,1, slots 3,2,1, measured and simulated bubble per stage"
        else fail "pp 3 report"; grep -E "pipeline|blocks per|stage [0-9]:" "$D/t3f.log"; fi
    fi
fi
if want ranks; then
    need_ref $REF
    need_ref $REF6
    layout r3i 3 1 ref6 "ranks pp 3 interleaved v 2" --layers 6 --total-batch 384 --pp 3 \
        --schedule interleaved --virtual-stages 2
    layout r4d 4 1 ref "ranks dp 2 x pp 2 ZeRO-3 1f1b" $M4 --layers 4 --dp 2 --pp 2 --zero 3
fi
if want repeats; then
    need_ref $REF
    layout r2z 2 1 ref "ranks pp 2 zb1" $M4 --layers 4 --pp 2 --schedule zb1
    layout r3g 3 1 ref "ranks pp 3 gpipe" $M4 --layers 4 --pp 3 --schedule gpipe
    layout r4f 4 1 ref "ranks pp 4 1f1b" $M4 --layers 4 --pp 4 --schedule 1f1b
fi
if want mixed; then
    need_ref $REF
    need_ref $REF8
    layout m2i 2 2 ref "mixed 2x2 dp 2 x pp 2 ZeRO-1 interleaved v 2" $M4 --layers 4 --dp 2 \
        --pp 2 --zero 1 --schedule interleaved --virtual-stages 2
    layout m4i 2 2 ref8 "mixed 2x2 pp 4 interleaved v 2" $M4 --layers 8 --pp 4 --schedule interleaved \
        --virtual-stages 2
    layout m3z 3 2 ref "mixed 3x2 dp 2 x pp 3 ZeRO-1 zb1, no overlap" $M4 --layers 4 --dp 2 \
        --pp 3 --zero 1 --schedule zb1 --overlap 0
    layout m4g 2 2 ref "mixed 2x2 pp 4 gpipe, split 1,1,1,1 by hand" $M4 --layers 4 --pp 4 \
        --schedule gpipe --pp-split 1,1,1,1
fi
if want resume mixed; then
    need_ref $REF
    # written at pp 4 (ranks x threads), step 5 ...
    if run w4 2 2 $M4 --layers 4 --pp 4 --save "$D/ck" --save-every 5; then
        # ... resumed at pp 1, pp 2 and dp 2 x pp 2
        run res1 1 1 $M4 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/ref.jsonl" "$D/res1.jsonl" "resume pp 4 -> 1 device" 5
        run res2 2 1 $M4 --pp 2 --schedule zb1 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/ref.jsonl" "$D/res2.jsonl" "resume pp 4 -> pp 2 zb1" 5
        run res22 2 2 $M4 --dp 2 --pp 2 --zero 1 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/ref.jsonl" "$D/res22.jsonl" "resume pp 4 -> dp 2 x pp 2 ZeRO-1" 5
    fi
fi
if want zb1; then
    # sampling, evaluation and --save-model through the stages: the same sample and model as one
    # device (the model within rounding of the norm's summation order)
    if run s1 1 1 $M4 --layers 4 --steps 4 --sample-len 24 --eval-every 2 --save-model "$D/s1.bin" &&
       run s4 2 2 $M4 --layers 4 --steps 4 --sample-len 24 --eval-every 2 --pp 4 --schedule zb1 \
           --save-model "$D/s4.bin"; then
        compare "$D/s1.jsonl" "$D/s4.jsonl" "mixed 2x2 pp 4 zb1, 4 steps"
        a=$(grep -a -A2 -- "---- sample at step 4" "$D/s1.log" | tail -n 1)
        b=$(grep -a -A2 -- "---- sample at step 4" "$D/s4.log" | tail -n 1)
        if [ -n "$a" ] && [ "$a" = "$b" ] && grep -q "eval      4 | val loss" "$D/s4.log" &&
           $PY - "$D/s1.bin" "$D/s4.bin" <<'EOF'
import array, sys
a, b = (array.array('f', open(p, 'rb').read()[1024:]) for p in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b))
print("model files: %d floats, largest difference %.2e" % (len(a), d))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and d < 1e-5 else 1)
EOF
        then echo "ok: pp 4 sampling, evaluation and --save-model match one device"
        else fail "pp 4 sampling / evaluation / save-model"; fi
    fi
fi
if want trace threads; then
    if run tr 1 2 $M4 --layers 4 --pp 2 --steps 4 --trace "$D/t.json"; then
        if $PY - "$D/t.json" <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {}
for e in ev:
    if e.get("ph") == "X" and e["tid"] % 4 == 0:  # tid = worker x 4 + lane, lane 0: the worker's own
        names.setdefault(e["tid"] // 4, set()).add(e["name"])
need = {0: {"forward", "backward", "send activation", "recv gradient", "optimizer"},
        1: {"forward", "backward", "recv activation", "send gradient", "optimizer"}}
ok = all(need[w] <= names.get(w, set()) for w in need)
print(sorted((w, sorted(n)) for w, n in names.items()))
sys.exit(0 if ok else 1)
EOF
        then echo "ok: --trace on pp 2: both stages' actions and transfers"
        else fail "trace on pp 2"; fi
    fi
fi
if want refuse threads; then
    # expect_bad "what" "message part" RANKS DEVICES args...: DEVICES PoCL devices per process,
    # --devices-per-rank DEVICES
    expect_bad() {
        what=$1; msg=$2; nr=$3; dpr=$4; shift 4
        refused "$what" "$msg" "$nr" "$dpr" --devices-per-rank "$dpr" "$@"
    }
    expect_bad "dp x pp vs workers" "--dp 2 x --pp 2 = 4 does not match the 2 workers" 1 2 --dp 2 --pp 2
    expect_bad "pp vs ranks" "--dp 1 x --pp 2 = 2 does not match the 3 workers" 3 1 --pp 2
    expect_bad "more stages than blocks" "each chunk needs one" 1 2 --layers 1 --pp 2
    expect_bad "interleaved: chunks vs blocks" "4 model chunks, but the model has 3 blocks" 1 2 \
        --layers 3 --pp 2 --schedule interleaved --virtual-stages 2 $M4
    expect_bad "split sum" "--pp-split '2,3' sums to 5 blocks; the model has 4" 1 2 --layers 4 \
        --pp 2 --pp-split 2,3
    expect_bad "split count" "has 3 entries; the pipeline has 2 model chunks" 1 2 --layers 4 \
        --pp 2 --pp-split 2,1,1
    expect_bad "split entry 0" "entry 2 is not a whole number >= 1" 1 2 --layers 4 --pp 2 \
        --pp-split 4,0
    expect_bad "unknown schedule" "unknown pipeline schedule \"2f2b\"" 1 2 --pp 2 --schedule 2f2b
    expect_bad "virtual stages without interleaved" "--virtual-stages 2 needs --schedule interleaved" \
        1 2 --pp 2 --virtual-stages 2
    expect_bad "interleaved micro-batches" "to be a multiple of --pp 3" 1 3 --layers 4 --pp 3 \
        --schedule interleaved $M4
    expect_bad "split without a pipeline" "--pp-split needs --pp >= 2" 1 1 --pp-split 2,2
fi

finish
