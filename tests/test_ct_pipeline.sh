#!/bin/sh
# test_ct_pipeline.sh CT_PIPELINE - the schedule viewer: its --json numbers against the closed
# forms (1F1B at unit costs: bubble (N-1)/(m+N-1), makespan 3(m+N-1), peak min(N-s, m);
# interleaved (N-1)/(v m+N-1); zb1 below 1f1b), the text timeline's rows and cells, the trace
# file, and bad input refused with status 2.
. "$(dirname "$0")/lib.sh"
P=$1

"$P" --pp 4 --micro-batches 8 --schedule 1f1b --json >"$D/a.json" || fail "1f1b --json"
"$P" --pp 4 --micro-batches 8 --schedule interleaved --virtual-stages 2 --json >"$D/i.json" ||
    fail "interleaved --json"
"$P" --pp 4 --micro-batches 8 --schedule zb1 --json >"$D/z.json" || fail "zb1 --json"
"$P" --pp 3 --micro-batches 6 --schedule gpipe --costs 1,1.5,0.5 --json >"$D/g.json" ||
    fail "gpipe --costs"
if $PY - "$D" <<'EOF2'; then echo "ok: --json numbers"; else fail "--json numbers"; fi
import json, sys
d = sys.argv[1]
a, i, z, g = (json.load(open("%s/%s.json" % (d, n))) for n in "aizg")
ok = abs(a["bubble_fraction"] - 3 / 11) < 1e-9 and a["makespan"] == 33
ok &= a["peak_activations"] == [4, 3, 2, 1] and len(a["timeline"]) == 4
ok &= abs(i["bubble_fraction"] - 3 / 19) < 1e-9
ok &= z["bubble_fraction"] < a["bubble_fraction"] and abs(z["bubble_fraction"] - 3 / 27) < 1e-9
# GPipe, F 1, B+W 2: makespan (m + N - 1) (F + B + W) = 8 x 3; every stage keeps all 6
ok &= abs(g["makespan"] - 24) < 1e-9 and g["peak_activations"] == [6, 6, 6]
ok &= all(e["end"] - e["start"] == (1 if e["kind"] == "FWD" else 2) for e in g["timeline"][0])
print(a["bubble_fraction"], i["bubble_fraction"], z["bubble_fraction"], g["makespan"])
sys.exit(0 if ok else 1)
EOF2
# the text: one row per stage, stage 3 of 1F1B at unit costs starts "F0 B0 == F1"
"$P" --pp 4 --micro-batches 8 --schedule 1f1b >"$D/a.txt" || fail "text"
if [ "$(grep -c '^stage [0-3] ' "$D/a.txt")" = 4 ] && grep -q '^stage 3  \.  \.  \.  F0 B0 == F1 B1' "$D/a.txt" &&
   grep -q '^bubble fraction 0.2727, makespan 33' "$D/a.txt"; then
    echo "ok: text timeline"
else
    fail "text timeline"; cat "$D/a.txt"
fi
"$P" --pp 2 --micro-batches 4 --schedule zb1 --trace "$D/t.json" >/dev/null || fail "--trace"
if $PY - "$D/t.json" <<'EOF2'; then echo "ok: --trace"; else fail "--trace"; fi
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
names = {(e["tid"], e["name"]) for e in ev}
ok = len(ev) == 2 * 4 * 3 and (0, "W3") in names and (1, "F0") in names
sys.exit(0 if ok else 1)
EOF2
bad() { expect_refusal "$*" "ct_pipeline: error" "$P" "$@"; }
bad --pp 0
bad --schedule 3f3b
bad --pp 3 --micro-batches 4 --schedule interleaved
bad --virtual-stages 2 --schedule 1f1b
bad --costs 1,2
bad --trace /nonexistent/dir/t.json
bad --frobnicate
finish
