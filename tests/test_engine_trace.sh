#!/bin/sh
# test_engine_trace.sh TRAIN_GPT MPIEXEC - train_gpt --trace on 1 device, dp = 2 as threads and
# dp = 2 as ranks: the file loads with Python's json module, holds complete events from every
# worker (its track: pid = rank, tid = 4 x worker), one "step" per traced step and worker, the
# actions (forward, backward with their micro-batch), the op groups (attention, mlp, loss) and the
# optimizer; communication on its own lane under data parallelism. Bad --trace-steps and a
# --trace in a missing directory are refused with status 2.
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
text_file 100
ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 4 --total-batch 128 --steps 5 \
      --text $D/text.txt --sample-len 0 --eval-every 0 --peak-tflops 1"

# check FILE WORKERS STEPS "what"
check() {
    if $PY - "$1" "$2" "$3" "$4" <<'PYEOF'; then :; else fail "$4"; fi
import json, sys
path, workers, steps, what = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
d = json.load(open(path))
ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
ok = True
def need(cond, msg):
    global ok
    if not cond:
        print("  %s: %s" % (what, msg)); ok = False
tids = sorted({e["tid"] for e in ev if e["tid"] % 4 == 0})
need(tids == [4 * w for w in range(workers)], "main tracks %s, want one per worker" % tids)
for w in range(workers):
    mine = [e for e in ev if e["tid"] == 4 * w]
    names = {e["name"] for e in mine}
    for n in ("forward", "backward", "attention", "mlp", "logits and loss", "optimizer",
              "gradient sync"):
        need(n in names, "worker %d has no '%s' event" % (w, n))
    need(sum(e["name"] == "step" for e in mine) == steps,
         "worker %d: %d step events, want %d" % (w, sum(e["name"] == "step" for e in mine), steps))
    mbs = sorted({e["args"]["mb"] for e in mine if e["name"] == "forward"})
    need(mbs == [0, 1], "worker %d: forward micro-batches %s, want [0, 1]" % (w, mbs))
    need(all(e["dur"] >= 0 and e["ts"] >= -1e6 for e in mine), "negative durations")
if workers > 1:
    need(any(e["tid"] % 4 == 1 and e["name"] == "bucket reduction" for e in ev),
         "no bucket reductions on a communication lane")
print("%s: %s: %d events, %d workers" % ("ok" if ok else "FAIL", what, len(ev), workers))
sys.exit(0 if ok else 1)
PYEOF
}

train one 1 1 --trace "$D/one.json" && check "$D/one.json" 1 3 "1 device, last three steps"
train threads 1 2 --dp 2 --trace "$D/th.json" --trace-steps 1:2 &&
    check "$D/th.json" 2 2 "dp 2 as threads, steps 1:2"
train ranks 2 1 --dp 2 --zero 1 --trace "$D/rk.json" && check "$D/rk.json" 2 3 "dp 2 as ranks, ZeRO-1"

for bad in "--trace-steps 3" "--trace-steps 4:2" "--trace $D/nowhere/t.json"; do
    refused "$bad" "--trace" 1 1 $bad
done
finish
