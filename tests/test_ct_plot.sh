#!/bin/sh
# test_ct_plot.sh CT_PLOT [TRAIN_GPT [PART]] - the pictures of a run (ct_plot), read back as XML
# by Debian's python3 (xml.etree).
#
# part "files" (no device): hand-written inputs in train_gpt's and bench_allreduce's formats
#   1. loss: one polyline per series with a point per record (train, its moving average, eval,
#      tokens/s), the legend's names; a resumed run's repeated steps and an unfinished last line
#      are drawn once and said in a note;
#   2. timeline: one row per (rank, worker lane) with events, labelled from the thread names,
#      a box per complete event, the legend; names with markup and broken UTF-8 stay XML;
#   3. bench: docs/allreduce-1x2.csv with the defaults (one line per algorithm, a point per row)
#      and with --x/--y/--series "" /--logy;
#   4. refusals: status 2, a message naming the problem, the output untouched (an old file stays
#      as it was, no temporary left): missing file, not JSON, no records of the kind, a trace
#      without traceEvents or complete events, unknown or non-numeric columns, bad flags;
#   5. outside bytes: random bytes, deep nesting, long strings: status 0 or 2, never a crash.
# part "run" (opencl): train_gpt's own files: a tiny run's --metrics, a pipeline run's --trace
#   (2 devices, pp 2): every train and eval record drawn, one row per worker with events.
. "$(dirname "$0")/lib.sh"
P=$1
TRAIN=${2:-}
PART=${3:-files}
DOCS=$(cd "$(dirname "$0")/../docs" && pwd)

# svgcheck FILE WHAT PYTHON: FILE parses as XML with an <svg> root; PYTHON (a body with r, the
# root, and q(tag, cls), the elements of that tag and class) exits 0 when it holds what it should.
svgcheck() {
    if $PY - "$1" "$3" <<'EOF'; then echo "ok: $2"; else fail "$2"; fi
import sys, xml.etree.ElementTree as ET
N = "{http://www.w3.org/2000/svg}"
try:
    r = ET.parse(sys.argv[1]).getroot()
except Exception as e:
    print("   not XML:", e); sys.exit(1)
if r.tag != N + "svg":
    print("   root", r.tag); sys.exit(1)
def q(tag, cls=None):
    return [e for e in r.iter(N + tag) if cls is None or e.get("class") == cls]
def npts(e):
    return len(e.get("points").split())
def texts(cls):
    return [e.text for e in q("text", cls)]
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("   not so:", what); ok = False
exec(sys.argv[2])
sys.exit(0 if ok else 1)
EOF
}

# plotted NAME args...: ct_plot args, status 0 and the file written
plotted() {
    _pl_name=$1
    shift
    if "$P" "$@" >"$D/$_pl_name.out" 2>"$D/$_pl_name.err" && [ -s "$D/$_pl_name.svg" ]; then
        return 0
    fi
    fail "$_pl_name: ct_plot $*: status $?"; cat "$D/$_pl_name.err"; return 1
}

if want files; then
    # ---- the inputs, written by python: train_gpt's record and trace formats (engine/train/,
    # engine/step/trace.c), and damaged or absurd files for part 5
    $PY - "$D" <<'EOF'
import json, sys
d = sys.argv[1]
def line(f, **r):
    f.write(json.dumps(r, separators=(",", ":")) + "\n")
def train(f, s, loss, tps):
    line(f, type="train", step=s, loss=loss, lr=1e-3, grad_norm=1.5, ms=6.5, tokens_per_s=tps,
         tflops=0.002, mfu=0.3, mem_bytes=1042112)
# 1. metrics: 60 steps (a resumed run repeats 40-44), 6 evals, records of other types (a nested
# object, a sample), a skipped step (loss null), an unfinished last line
with open(d + "/m.jsonl", "w") as f:
    line(f, type="config", params=34176, layers=2, heads=2, dim=32, vocab=256, seq=16)
    line(f, type="memory", worker=0, params=136704,
         predicted={"params": 136704, "largest_name": "wte"})
    for first, last in ((0, 45), (40, 60)):
        for s in range(first, last):
            train(f, s, 5.5 - s * 0.04 + (s % 3) * 0.05 * (first == 0), 9000 + (s % 5) * 100)
            if s % 10 == 9:
                line(f, type="eval", step=s + 1, val_loss=5.4 - s * 0.04)
    line(f, type="train", step=60, loss=None, grad_norm=None, tokens_per_s=9500, skipped=True)
    line(f, type="sample", step=60, tokens=256, text='a "quoted" \u00e9 <sample>')
    f.write('{"type":"train","step":61,"lo')
# 2. a trace: 2 ranks; rank 0 holds workers 0 and 1, rank 1 workers 2 and 3; each worker's
# prefetch lane is named and has no events (no row); nested spans, a bucket reduction on the comm
# lane; an odd name (markup, a control character, an emoji, a broken UTF-8 byte); a "B" event
ev = [{"name": "process_name", "ph": "M", "pid": r, "args": {"name": "rank %d" % r}} for r in (0, 1)]
for w in range(4):
    for lane, suffix in enumerate(("", " comm", " prefetch")):
        ev.append({"name": "thread_name", "ph": "M", "pid": w // 2, "tid": w * 4 + lane,
                   "args": {"name": "worker %d%s" % (w, suffix)}})
def x(name, ts, dur, w, lane=0, mb=0):
    ev.append({"name": name, "cat": "c", "ph": "X", "ts": ts, "dur": dur, "pid": w // 2,
               "tid": w * 4 + lane, "args": {"mb": mb}})
for w in range(4):
    for t in (0, 10000):
        x("step", t + 0.5, 9000, w)
        for mb in (0, 1):
            x("forward", t + 100 + mb * 4000, 2000, w, mb=mb)
            x("attention", t + 200 + mb * 4000, 500, w, mb=mb)
            x("backward", t + 2100 + mb * 4000, 1800, w, mb=mb)
        x("bucket reduction", t + 7000, 700, w, lane=1)
ev.append({"name": "begin", "ph": "B", "ts": 1, "pid": 0, "tid": 0})
text = json.dumps({"displayTimeUnit": "ms", "traceEvents": ev})
odd = ('{"name":"<b>&\\"odd\\" \\u0001 name \\ud83d\\ude00\xc3(","ph":"X","ts":100,"dur":50,'
       '"pid":0,"tid":0},')
text = text.replace('"traceEvents": [', '"traceEvents": [' + odd, 1)
open(d + "/t.json", "wb").write(text.encode("latin-1"))
# 5. outside bytes: deep nesting, 5000-byte names on 300 tracks (half the events with an absurd
# duration), absurd numbers, a number of 200 digits, a quoted CSV with broken UTF-8
open(d + "/deep.json", "w").write('{"traceEvents":[{"args":' + "[" * 100000)
ev = [{"name": "x" * 5000, "ph": "X", "ts": i, "dur": 1e300 if i % 2 else 5, "tid": i % 300}
      for i in range(400)]
open(d + "/long.json", "w").write(json.dumps({"traceEvents": ev}))
with open(d + "/huge.jsonl", "w") as f:
    line(f, type="train", step=1e308, loss=-1e308, tokens_per_s=1e-320)
    line(f, type="train", step=-5, loss=1e300, tokens_per_s=1)
    f.write('{"type":"eval","step":0,"val_loss":1e999}\n')
open(d + "/digits.jsonl", "w").write('{"type":"eval","step":1,"val_loss":%s}\n' % ("9" * 200))
open(d + "/q.csv", "wb").write(b'size,busbw,algorithm\n"8",1,"ri""ng"\n16,2,"\xff\xfe"\n0,3,ring\n')
EOF
    # ---- 1. loss
    if plotted loss loss "$D/m.jsonl" -o "$D/loss.svg"; then
        svgcheck "$D/loss.svg" "loss: 60 steps, their mean, 6 evals, 61 tokens/s points, legend" '
t = q("polyline", "train"); m = q("polyline", "train-mean"); e = q("polyline", "eval")
k = q("polyline", "tokens")
check(len(t) == 1 and npts(t[0]) == 60, "train: one line of 60 points")
check(len(m) == 1 and npts(m[0]) == 60, "train-mean: one line of 60 points")
check(len(e) == 1 and npts(e[0]) == 6, "eval: one line of 6 points")
check(len(k) == 1 and npts(k[0]) == 61, "tokens: one line of 61 points (the skipped step too)")
leg = texts("legend")
check("train loss" in leg and "validation loss" in leg, "legend %s" % leg)
check(any(x.startswith("train loss, mean of") for x in leg), "legend names the mean")'
        grep -q "step(s) recorded more than once" "$D/loss.err" && grep -q "unfinished" "$D/loss.err" &&
            grep -q "without a finite loss" "$D/loss.err" &&
            echo "ok: loss: notes on repeats, the unfinished line, the skipped step" ||
            { fail "loss: notes"; cat "$D/loss.err"; }
    fi
    # eval records alone draw too (a run with no train record in its file)
    grep '"eval"' "$D/m.jsonl" >"$D/e.jsonl"
    plotted loss_e loss "$D/e.jsonl" -o "$D/loss_e.svg" &&
        svgcheck "$D/loss_e.svg" "loss: evals alone" '
check(len(q("polyline", "eval")) == 1 and not q("polyline", "train"), "one eval line")'

    # ---- 2. timeline
    if plotted tl timeline "$D/t.json" -o "$D/tl.svg"; then
        svgcheck "$D/tl.svg" "timeline: 8 rows, 65 boxes, labels, legend" '
rows = q("g", "track")
labels = texts("track-label")
want = ["rank 0: worker 0", "rank 0: worker 0 comm", "rank 0: worker 1", "rank 0: worker 1 comm",
        "rank 1: worker 2", "rank 1: worker 2 comm", "rank 1: worker 3", "rank 1: worker 3 comm"]
check(len(rows) == 8 and labels == want, "rows %d %s" % (len(rows), labels))
check(len(q("rect", "event")) == 4 * 2 * (1 + 2 * 3 + 1) + 1, "boxes %d" % len(q("rect", "event")))
leg = texts("legend")
check(set(["step", "forward", "backward", "attention", "bucket reduction"]) <= set(leg), "legend %s" % leg)
check(any(x.startswith("<b>&\"odd\"") for x in leg), "the odd name escaped: %s" % leg)'
        grep -q "phases other than X" "$D/tl.err" && echo "ok: timeline: a note on the B event" ||
            fail "timeline: no note on the B event"
    fi
    # the JSON Array Format (the events alone) and ct_pipeline-style events (args.action colours)
    printf '[{"name":"F0","ph":"X","ts":0,"dur":1000,"pid":0,"tid":0,"args":{"action":"FWD","mb":0}},
{"name":"B0","ph":"X","ts":1000,"dur":1000,"pid":0,"tid":1,"args":{"action":"BWD","mb":0}}]' >"$D/a.json"
    plotted tla timeline "$D/a.json" -o "$D/tla.svg" &&
        svgcheck "$D/tla.svg" "timeline: a bare event array, coloured by action" '
rows = texts("track-label")
check(len(q("g", "track")) == 2 and rows == ["tid 0", "tid 1"], "rows %s" % rows)
check(sorted(texts("legend")) == ["BWD", "FWD"], "legend %s" % texts("legend"))'

    # ---- 3. bench: bench_allreduce's CSV with the defaults, then chosen columns
    CSV=$DOCS/allreduce-1x2.csv
    if plotted b bench "$CSV" -o "$D/b.svg"; then
        svgcheck "$D/b.svg" "bench: a line per algorithm, a point per row, the legend" "
import csv
rows = list(csv.DictReader(open('$CSV')))
algos = list(dict.fromkeys(x['algorithm'] for x in rows))
lines = q('polyline', 'series')
check(len(lines) == len(algos), 'lines %d, algorithms %d' % (len(lines), len(algos)))
check(all(npts(l) == sum(1 for x in rows if x['algorithm'] == a) for l, a in zip(lines, algos)), 'points per line')
check(texts('legend') == algos, 'legend %s' % texts('legend'))
check(any(t.text and 'log scale' in t.text for t in q('text')), 'x on a log scale')"
    fi
    plotted b2 bench "$CSV" -o "$D/b2.svg" --x count --y time_us --series "" --logy --title "all of it" &&
        svgcheck "$D/b2.svg" "bench: --x count --y time_us --series \"\" --logy: one line" "
n = sum(1 for _ in open('$CSV')) - 1
lines = q('polyline', 'series')
check(len(lines) == 1 and npts(lines[0]) == n, 'one line of %d points' % n)
check(any(t.text == 'all of it' for t in q('text')), 'the title')"

    # ---- 4. refusals: status 2, the message, the old output untouched, no temporary left
    refuse() {
        _rf_what=$1 _rf_msg=$2
        shift 2
        echo OLD >"$D/old.svg"
        expect_refusal "$_rf_what" "$_rf_msg" "$P" "$@" -o "$D/old.svg"
        [ "$(cat "$D/old.svg")" = OLD ] || fail "$_rf_what: the old output was changed"
        ls "$D" | grep -q '\.tmp\.' && fail "$_rf_what: a temporary file was left"
    }
    printf 'step,loss\n1,2\n' >"$D/notjson.jsonl"
    printf '{"type":"train","step":1,"loss":2}\n{"type":"eval","step":1 "val_loss":2}\n' >"$D/bad2.jsonl"
    printf '{"type":"train","step":2,"loss":2}\n' >>"$D/bad2.jsonl"
    printf '{"type":"config","params":1}\n{"type":"sample","step":3}\n' >"$D/none.jsonl"
    printf '{"displayTimeUnit":"ms"}\n' >"$D/noev.json"
    printf '{"traceEvents":[{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"w"}}]}' >"$D/nox.json"
    printf '{"traceEvents":[{"name":"x","ph":"X","ts":1,"dur":2},' >"$D/cut.json"
    printf 'size,busbw,algorithm\n8,abc,ring\n' >"$D/nan.csv"
    printf 'size,busbw,algorithm\n8,1,ring,extra\n' >"$D/wide.csv"
    printf 'a,b\n1,2\n' >"$D/nobusbw.csv"
    refuse "a missing file" "cannot open" loss "$D/nonexistent.jsonl"
    refuse "metrics that are not JSON" "line 1, column 1: not JSON" loss "$D/notjson.jsonl"
    refuse "a broken record in the middle" "line 2, column 25: not JSON: expected ',' or '}'" loss "$D/bad2.jsonl"
    refuse "metrics without train or eval records" 'no "type":"train" record' loss "$D/none.jsonl"
    refuse "a trace that is JSON Lines" "more after the trace object" timeline "$D/m.jsonl"
    refuse "a trace without traceEvents" "no traceEvents array" timeline "$D/noev.json"
    refuse "a trace without complete events" 'no complete ("ph":"X") events' timeline "$D/nox.json"
    refuse "a cut trace" "traceEvents does not end (the text ends there)" timeline "$D/cut.json"
    refuse "a CSV value that is not a number" "line 2: busbw is 'abc', not a number" bench "$D/nan.csv"
    refuse "a CSV row with more fields than the header" "line 2 has 4 field(s), the header 3" bench "$D/wide.csv"
    refuse "a CSV without busbw and no --y" "name the column to draw with --y" bench "$D/nobusbw.csv"
    refuse "an unknown column" "--y 'nope' is not a column (the header has: size, count," bench "$CSV" --y nope
    refuse "an unknown series column" "--series 'algo' is not a column" bench "$CSV" --series algo
    refuse "an empty CSV" "empty (no header line)" bench /dev/null
    refuse "an unknown flag" "unknown flag '--frobnicate'" loss "$D/m.jsonl" --frobnicate
    refuse "an unknown mode" "unknown mode 'curves'" curves "$D/m.jsonl"
    refuse "a bench flag with loss" "--logy is for bench only" loss "$D/m.jsonl" --logy
    refuse "a width out of range" "--width wants a number of pixels" loss "$D/m.jsonl" --width 5
    expect_refusal "no -o" "loss needs -o OUT.svg" "$P" loss "$D/m.jsonl"
    expect_refusal "--title without a value" "--title needs a value" "$P" loss "$D/m.jsonl" -o "$D/x.svg" --title
    expect_refusal "no mode" "no mode" "$P"
    expect_refusal "an output folder that does not exist" "cannot write $D/no/such/dir/x.svg" \
        "$P" loss "$D/m.jsonl" -o "$D/no/such/dir/x.svg"
    if "$P" --help >"$D/help" 2>&1 && grep -q "usage: ct_plot loss" "$D/help"; then
        echo "ok: --help (status 0)"
    else
        fail "--help"
    fi

    # ---- 5. outside bytes: never a crash (status 0 or 2), and what is written is XML
    head -c 20000 /dev/urandom >"$D/rand.bin"
    for mode in loss timeline bench; do
        for f in rand.bin deep.json long.json huge.jsonl digits.jsonl q.csv; do
            rm -f "$D/fz.svg"
            "$P" $mode "$D/$f" -o "$D/fz.svg" >"$D/fz.out" 2>&1
            rc=$?
            if [ $rc -ne 0 ] && [ $rc -ne 2 ]; then fail "$mode $f: status $rc"; tail -n 3 "$D/fz.out"; continue; fi
            if [ $rc -eq 0 ] && ! $PY -c "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])" "$D/fz.svg"; then
                fail "$mode $f: the SVG is not XML"
            fi
            [ $rc -eq 2 ] && [ -e "$D/fz.svg" ] && fail "$mode $f: refused, yet wrote the output"
        done
    done
    echo "ok: random bytes, 100000-deep nesting, 5000-byte names, absurd numbers, quoted CSV: status 0 or 2"
fi

if [ -n "$TRAIN" ] && want run; then
    text_file 300
    ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 4 --text $D/text.txt --sample-len 0"
    if train m 1 1 --steps 20 --eval-every 5; then
        plotted rl loss "$D/m.jsonl" -o "$D/rl.svg" &&
            svgcheck "$D/rl.svg" "loss of a real run: 20 steps, 4 evals" '
check(npts(q("polyline", "train")[0]) == 20 and npts(q("polyline", "tokens")[0]) == 20, "20 train points")
check(npts(q("polyline", "eval")[0]) == 4, "4 eval points")'
    fi
    ARGS="--layers 4 --heads 2 --dim 32 --seq 16 --batch 4 --total-batch 256 --text $D/text.txt --sample-len 0"
    if train pp 1 2 --pp 2 --steps 3 --eval-every 0 --trace "$D/pp.json"; then
        plotted rt timeline "$D/pp.json" -o "$D/rt.svg" &&
            svgcheck "$D/rt.svg" "timeline of a real pp 2 run: a row per worker lane with events" '
labels = texts("track-label")
check(labels[:1] == ["worker 0"] and "worker 1" in labels and len(labels) == len(q("g", "track")), "rows %s" % labels)
leg = texts("legend")
check(set(["forward", "backward", "send activation", "recv gradient", "optimizer"]) <= set(leg), "legend %s" % leg)'
    fi
fi
finish
