#!/bin/sh
# test_ct_plan.sh CT_PLAN TRAIN_GPT MPIEXEC - the layout planner as users run it.
#
# 1. ct_plan measured on 2 workers (2 ranks, and 2 PoCL devices of one process): --json parses,
#    the fitting layouts come first, fastest first, the chosen one is the first; --write-links
#    writes a table that ct_plan --links reads when planning for those workers from one process.
# 2. train_gpt --layout auto picks a layout, says which, trains it, and its 10 losses equal the
#    single device's within 1e-5 (whatever it picked runs right); it prints the predicted step
#    time beside the measured one after 5 steps and writes a "plan" record; a pinned flag
#    (--tp 2) is kept.
#    Under --max-alloc-mb (a device's largest single buffer) only the layouts whose largest
#    buffer fits are chosen, and --layout auto trains one.
# 3. A model that fits no layout under --mem-cap-gb is refused (status 2) naming the smallest
#    shortfall, by ct_plan and by train_gpt --layout auto, before any training; one whose every
#    layout needs a buffer above --max-alloc-mb, naming the smallest such buffer.
# 4. Bad input: status 2 with a message naming it.
# (1b: a mixture of experts enumerates exactly the layouts its rules allow, ep among them.)
# part: "all" (default), "rules" (1b, one --layout auto run, 3, 4), "measured" (1, the other
# --layout auto runs, 2b: calibrations and timed choices, labelled slow in tests/suites.cmake).
. "$(dirname "$0")/lib.sh"
PLAN=$1
TRAIN=$2
MPIEXEC=$3
PART=${4:-all}

text_file 300
MODEL="--layers 2 --heads 4 --dim 32 --seq 16 --batch 4 --total-batch 128"
ARGS="$MODEL --steps 10 --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 \
      --eval-every 0 --peak-tflops 1"

# 1. ct_plan, measured on 2 ranks and on 2 threads
ALL3="{(2, 1, 1), (1, 2, 1), (1, 1, 2)}"
check_json() { # FILE WHAT [LAYOUTS: the (dp,tp,pp) set expected, python]
    if $PY - "$1" "$2" "${3:-$ALL3}" <<'EOF'; then :; else fail "ct_plan --json ($2)"; fi
import json, sys
r = json.load(open(sys.argv[1]))
L = r["layouts"]
fit = [l for l in L if l["fits"]]
ok = r["workers"] == 2 and len(L) >= 3 and len(fit) == r["fit"]
ok &= all(l["fits"] for l in L[:len(fit)])                          # fitting ones first
ok &= all(a["step_ms"] <= b["step_ms"] for a, b in zip(fit, fit[1:]))  # fastest first
ok &= r["chosen"] == fit[0]["name"] and all(l["step_ms"] > 0 for l in L)
ok &= {(l["dp"], l["tp"], l["pp"]) for l in L} == eval(sys.argv[3])
ok &= all(l["mem_known"] and l["mem"]["total"] > 0 for l in L)        # the memory model answered
print("%s: ct_plan %s: %d layouts, chosen %s (%.2f ms predicted), costs: %s" %
      ("ok" if ok else "FAIL", sys.argv[2], len(L), r["chosen"], fit[0]["step_ms"],
       r["costs"]["source"]))
sys.exit(0 if ok else 1)
EOF
}
if want measured; then
    if logged "$D/plan_r.json" "$D/plan_r.err" launch 2 1 "$PLAN" $MODEL --json --reps 2 \
            --write-links "$D/links.txt"; then
        check_json "$D/plan_r.json" "2 ranks"
        if grep -q "^link allreduce 2 ranks" "$D/links.txt" && grep -q "^link p2p 2 ranks" "$D/links.txt"; then
            echo "ok: --write-links: $(grep -c '^link' "$D/links.txt") links"
        else
            fail "--write-links"; cat "$D/links.txt"
        fi
        # planning for those 2 workers (ranks) from one process: compute here, links from the table
        # (tp 1: a TP shape is timed with its collectives inside, which one worker cannot run)
        if logged "$D/plan_t.json" "$D/plan_t.err" launch 1 1 "$PLAN" $MODEL --workers 2 --tp 1 \
                --links "$D/links.txt" --json --reps 2; then
            check_json "$D/plan_t.json" "--workers 2 --tp 1 --links (from one process)" \
                "{(2, 1, 1), (1, 1, 2)}"
        else
            fail "ct_plan --links"; cat "$D/plan_t.err"
        fi
    else
        fail "ct_plan on 2 ranks"; cat "$D/plan_r.err"
    fi
    if logged "$D/plan_d.json" "$D/plan_d.err" launch 1 2 "$PLAN" $MODEL --devices-per-rank 2 --json \
            --reps 2; then
        check_json "$D/plan_d.json" "2 devices of one process"
    else
        fail "ct_plan on 2 threads"; cat "$D/plan_d.err"
    fi
fi

# 1b. a mixture of experts (2 blocks, 2 micro-batches): exactly the layouts a plain restatement of
#     the MoE rules allows (ep divides dp and the 4 experts; tp divides the 4 heads, sequence
#     parallelism on or off with tp > 1; ZeRO 0 to 3 with dp > 1; no zb1; no interleaving: 2
#     blocks), ep > 1 and tp > 1 among them, memory answered for each
if want rules; then
    if logged "$D/plan_moe.json" "$D/plan_moe.err" launch 1 1 "$PLAN" $MODEL --experts 4 --top-k 2 \
            --workers 4 --devices-per-rank 2 --no-calibrate --json; then
        if $PY - "$D/plan_moe.json" <<'EOF'; then :; else fail "ct_plan MoE layouts"; fi
import json, sys
L = json.load(open(sys.argv[1]))["layouts"]
want = set()
for dp, tp, pp in ((4, 1, 1), (2, 1, 2), (2, 2, 1), (1, 2, 2), (1, 4, 1)):
    for ep in range(1, dp + 1):
        if dp % ep or 4 % ep: continue
        for z in range(0, 4 if dp > 1 else 1):
            for s in (["1f1b", "gpipe"] if pp > 1 else ["none"]):
                for sp in ((0, 1) if tp > 1 else (0,)):
                    want.add((dp, tp, pp, ep, z, s, sp))
got = {(l["dp"], l["tp"], l["pp"], l["ep"], l["zero"], l["schedule"], l["sequence_parallel"])
       for l in L}
ok = got == want and len(got) == len(L) and all(l["mem_known"] for l in L)
ok &= max(l["ep"] for l in L) > 1 and max(l["tp"] for l in L) > 1
print("%s: ct_plan MoE: %d layouts (rules: %d), ep up to %d, tp up to %d" %
      ("ok" if ok else "FAIL", len(L), len(want), max(l["ep"] for l in L), max(l["tp"] for l in L)))
if not ok: print(sorted(got ^ want))
sys.exit(0 if ok else 1)
EOF
    else
        fail "ct_plan MoE"; cat "$D/plan_moe.err"
    fi
fi

# 2. train_gpt --layout auto against the single device
need_ref
auto() {
    name=$1; shift
    train "$name" 1 2 --layout auto "$@" || return 1
    if $PY - "$D/ref.jsonl" "$D/$name.jsonl" "$D/$name.log" "$name" <<'EOF'; then :; else fail "$name"; fi
import json, re, sys
def recs(p): return [json.loads(l) for l in open(p)]
a = {r["step"]: r["loss"] for r in recs(sys.argv[1]) if r["type"] == "train"}
rb = recs(sys.argv[2])
b = {r["step"]: r["loss"] for r in rb if r["type"] == "train"}
plan = [r for r in rb if r["type"] == "plan"]
cfg = [r for r in rb if r["type"] == "config"][0]
log = open(sys.argv[3]).read()
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a) if set(a) == set(b) else 1
chosen = re.search(r"chosen: (.*?) \(", log)
ok = worst <= 1e-5 and len(plan) == 2 and plan[0]["steps"] == 5 and plan[0]["predicted_ms"] > 0
ok &= chosen is not None and plan[0]["layout"] == chosen.group(1)
ok &= "layout auto: %s predicted" % plan[0]["layout"] in log and "measured" in log
print("%s: %s: chose %s (config dp %d tp %d), predicted %.1f ms, measured %.1f ms after 5 steps; "
      "losses within %.2e of one device" % ("ok" if ok else "FAIL", sys.argv[4],
      plan[0]["layout"] if plan else "?", cfg["dp"], cfg["tp"],
      plan[0]["predicted_ms"] if plan else 0, plan[0]["measured_ms"] if plan else 0, worst))
sys.exit(0 if ok else 1)
EOF
}
want rules && auto auto
if want measured; then
    auto auto_tp2 --tp 2 && grep -q '"tp":2' "$D/auto_tp2.jsonl" || fail "--layout auto --tp 2 did not keep tp 2"
fi

# 2b. a device whose largest single buffer (--max-alloc-mb 0.06: 62914 bytes) holds the logits
#     of a worker with half the rows (dp 2) or half the vocabulary (tp 2), not a whole
#     micro-batch's (the last pipeline stage's, 4 x 16 x 256 floats): exactly the layouts whose
#     largest buffer is below it fit (pp 2 does not), the choice among them; train_gpt --layout
#     auto under the same limit trains what it picked within 1e-5 of one device
if want measured; then
    if logged "$D/plan_a.json" "$D/plan_a.err" launch 1 2 "$PLAN" $MODEL --devices-per-rank 2 --json \
            --reps 1 --max-alloc-mb 0.06; then
        if $PY - "$D/plan_a.json" <<'EOF'; then :; else fail "ct_plan --max-alloc-mb"; fi
import json, sys
r = json.load(open(sys.argv[1]))
L, lim = r["layouts"], r["max_alloc"]
ok = lim == int(0.06 * 1048576) and all(l["largest_buffer"] > 0 for l in L)
ok &= all(l["fits"] == (l["largest_buffer"] <= lim) for l in L)
ok &= any(not l["fits"] and l["pp"] == 2 for l in L) and any(l["fits"] for l in L)
ok &= r["chosen"] == [l for l in L if l["fits"]][0]["name"]
print("%s: ct_plan --max-alloc-mb 0.06: %d of %d layouts fit (largest buffers %s), chosen %s" %
      ("ok" if ok else "FAIL", r["fit"], len(L),
       sorted({(" ".join(l["name"].split()[:3]), l["largest_buffer"]) for l in L}),
       r["chosen"]))
sys.exit(0 if ok else 1)
EOF
    else
        fail "ct_plan --max-alloc-mb"; cat "$D/plan_a.err"
    fi
    auto auto_alloc --max-alloc-mb 0.06 && logsays "$D/auto_alloc.log" "single buffers up to 0.06 MiB"
fi

# 1c. planning for 8 workers from one process, no links table: every layout of 8 with its
#     memory; those without TP timed here with the default link model (named, on stdout and in
#     the JSON), those with TP listed after them, not timed, saying why; stderr says what was
#     not measured and how to measure it
if want rules; then
    if logged "$D/plan_8.json" "$D/plan_8.err" env POCL_DEVICES=pthread "$PLAN" $MODEL --workers 8 \
            --json --reps 1; then
        if $PY - "$D/plan_8.json" "$D/plan_8.err" <<'EOF'; then :; else fail "ct_plan --workers 8 from one process"; fi
import json, sys
r = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
L = r["layouts"]
timed = [l for l in L if l["timed"]]
untimed = [l for l in L if not l["timed"]]
ok = r["workers"] == 8 and len(L) > 0 and all(l["mem_known"] and l["mem"]["total"] > 0 for l in L)
ok &= "default model" in r["costs"]["source"] and r["costs"]["workers_timed"] == 1
ok &= all(l["tp"] == 1 and l["step_ms"] > 0 for l in timed) and len(timed) > 0
ok &= all(l["tp"] > 1 and "needs that many workers" in l["why_untimed"] for l in untimed)
ok &= len(untimed) > 0 and {l["tp"] for l in L} >= {1, 2, 4}
fit = [l for l in L if l["fits"]]
ok &= r["chosen"] == fit[0]["name"] and fit[0]["timed"]
ok &= all(a["step_ms"] <= b["step_ms"] for a, b in zip(timed, timed[1:]) if a["fits"] and b["fits"])
ok &= "links not measured" in err and "--links FILE" in err and "not timed" in err
print("%s: ct_plan --workers 8 from one process: %d layouts (%d timed, %d with TP by memory), "
      "chosen %s; %s" % ("ok" if ok else "FAIL", len(L), len(timed), len(untimed), r["chosen"],
                         r["costs"]["source"]))
sys.exit(0 if ok else 1)
EOF
    else
        fail "ct_plan --workers 8 from one process"; cat "$D/plan_8.err"
    fi
fi

# 3. nothing fits: the smallest shortfall; the smallest buffer above the device's limit
if want rules; then
    expect_refusal "ct_plan, nothing fits" "smallest shortfall" env POCL_DEVICES="pthread pthread" \
        "$PLAN" $MODEL --devices-per-rank 2 --reps 1 --mem-cap-gb 0.0001
    expect_refusal "train_gpt --layout auto, nothing fits" "smallest shortfall" env \
        POCL_DEVICES="pthread pthread" "$TRAIN" $ARGS --devices-per-rank 2 --layout auto \
        --mem-cap-gb 0.0001 --metrics "$D/bad.jsonl"
    [ -s "$D/bad.jsonl" ] && fail "train_gpt --layout auto started training although nothing fits"
    expect_refusal "ct_plan, no buffer fits" "needs a single buffer above the device's largest" env \
        POCL_DEVICES="pthread pthread" "$PLAN" $MODEL --devices-per-rank 2 --reps 1 \
        --max-alloc-mb 0.03
fi

# 4. bad input
if want rules; then
    expect_refusal "--layout maybe" "--layout must be manual or auto" "$TRAIN" $ARGS --layout maybe
    expect_refusal "ct_plan --workers 3 over 2 per rank" "not a multiple of --devices-per-rank 2" env \
        POCL_DEVICES=pthread "$PLAN" $MODEL --workers 3 --devices-per-rank 2 --no-calibrate
    expect_refusal "ct_plan --links missing" "cannot open it" env POCL_DEVICES=pthread "$PLAN" $MODEL \
        --workers 2 --links "$D/none.txt"
    expect_refusal "ct_plan --tp 3 (no layout)" "no layout of 2 workers" env POCL_DEVICES=pthread \
        "$PLAN" $MODEL --workers 2 --tp 3 --no-calibrate
    expect_refusal "ct_plan --top 0" "--top needs a whole number >= 1" "$PLAN" $MODEL --top 0
    expect_refusal "ct_plan --bogus" "unknown" "$PLAN" $MODEL --bogus 1
fi
if want measured && [ -f "$D/links.txt" ]; then
    # from one worker with the measured table, tp free: tp 2 listed by memory, not timed
    if logged "$D/plan_1.txt" "$D/plan_1.err" env POCL_DEVICES=pthread "$PLAN" $MODEL --workers 2 \
            --links "$D/links.txt" --reps 1 &&
       grep -q "dp1 tp2 pp1 .* not timed: no compute cost .* at tp 2" "$D/plan_1.txt" &&
       grep -q "links from the table given" "$D/plan_1.err"; then
        echo "ok: --workers 2 --links from one worker, tp free: tp 2 listed by memory, not timed"
    else
        fail "--workers 2 --links from one worker, tp free"; cat "$D/plan_1.txt" "$D/plan_1.err"
    fi
fi

finish
