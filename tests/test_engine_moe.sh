#!/bin/sh
# test_engine_moe.sh TRAIN_GPT MPIEXEC [part] - mixture of experts and expert parallelism (issue 11)
# through train_gpt.
#
# 1. Layouts against the single-device MoE run (E = 4 experts, top-k 2, capacity factor 1 so that
#    choices are dropped, aux-loss 0.05, 2 micro-batches, clipping active): ep = 2 (dp 2), ep = 4
#    (dp 4) and ep = 2 inside dp = 4, each with ZeRO 0 and 1, as threads, as MPI ranks and mixed:
#    the 10 losses within 1e-5 relative, the auxiliary losses within 1e-5, the drop fractions and
#    busiest-expert loads the same; the "moe" records' tokens per worker add up to the choices
#    kept; the "memory" records within 5 % of the ZeRO formulas (experts over dp / ep), and in
#    every run each worker's record equal to the memory model's prediction in every category
#    (the experts' parameters and optimizer state over ep, the MoE layer's saved tensors and
#    scratch, its EP staging in comm). With a pipeline: pp 2, and dp 2 (ep 2) x pp 2 with ZeRO-1.
# 2. A checkpoint written under dp 4 (ep 2) ZeRO-1 resumes on one device, under dp 2 (ep 2) and
#    under 4 ranks (ep 4), continuing the reference curve.
# 3. Model files: --save-model *.safetensors after an expert-parallel run; Python reads it with
#    json + numpy (no safetensors package); --init from it and --save-model again gives the same
#    bytes; a dense model saved in both formats: --init from the safetensors one and saving as
#    llm.c gives the llm.c file's bytes; Python's reader agrees with the llm.c file. Damaged files
#    (not JSON, a missing tensor, a wrong shape, F16, overlapping or out-of-range offsets, a
#    missing metadata field) are refused with status 2 naming the tensor or field.
# 4. Impossible combinations are refused with status 2 and a message before any work.
# 6. Experts under tensor parallelism (each expert split over the TP group as the dense MLP is):
#    tp 2 as threads, tp 2 with sequence parallelism as ranks, tp 2 x dp 2 (ep 2) ZeRO-1 as
#    threads and with SP mixed (2 ranks x 2): the same losses, routing and norms as one device
#    (the moe records' rows per worker add up to tp x the choices kept: each TP worker computes
#    its slice of every kept choice); memory predicted == allocated; a checkpoint written at
#    tp 2 x dp 2 (ep 2) resumes at dp 2 (ep 2) on the reference curve; recomputation (attention,
#    block) under tp 2 x dp 2 (ep 2) with SP bitwise the losses of none; top-6 of 8 experts at
#    C = 4 under tp 2 (more gate gradients per token than channels) against its own one device.
# 5. Recomputation with MoE blocks (--recompute attention, block): the losses, auxiliary losses
#    and gradient norms bitwise those of --recompute none, on one device, as threads dp 4 (ep 2)
#    ZeRO-1, as ranks dp 2 (ep 2) and under pp 2 (1F1B); the memory records predicted == allocated.
# part: "all" (default), "threads", "ranks" (the threads part's layouts over ranks: a transport
# repeat, labelled slow in tests/suites.cmake), "mixed", "ep" (dp 4 (ep 2) ZeRO-1 over 2 ranks x
# 2 threads: expert parallelism's one layout in the sanitizer pass), "resume" (slow: the tp part
# resumes experts across layouts too), "files", "refuse", "recompute", "tp", "zero23" (ZeRO 2, 3).
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 8 --total-batch 256 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --experts 4 --top-k 2 --capacity-factor 1.0 --aux-loss 0.05"

# compare_moe REF.jsonl OTHER.jsonl "what" [first_step [tp]]: lib.sh's compare for experts: losses
# within 1e-5 relative, the same routing (aux within 1e-5, drop fraction and max load equal), the
# moe records consistent (rows per worker adding up to tp x the choices kept).
compare_moe() {
    if $PY - "$1" "$2" "$3" "${4:-0}" "${5:-1}" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def recs(p, t):
    return {r["step"]: r for r in map(json.loads, open(p)) if r.get("type") == t}
a, b, what, first = recs(sys.argv[1], "train"), recs(sys.argv[2], "train"), sys.argv[3], int(sys.argv[4])
tp = int(sys.argv[5])
steps = [s for s in sorted(a) if s >= first]
if not steps or any(s not in b for s in steps):
    print("missing steps in", what, sorted(b)); sys.exit(1)
worst = max(abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]) for s in steps)
waux = max(abs(a[s]["aux_loss"] - b[s]["aux_loss"]) / abs(a[s]["aux_loss"]) for s in steps)
route = all(a[s]["drop_frac"] == b[s]["drop_frac"] and a[s]["max_load"] == b[s]["max_load"]
            for s in steps)
clipped = sum(1 for s in steps if a[s]["grad_norm"] > 0.3)
drops = sum(1 for s in steps if b[s]["drop_frac"] > 0)
moe = recs(sys.argv[2], "moe")
ok = worst <= 1e-5 and waux <= 1e-5 and route and drops > 0
for s in steps:
    m = moe.get(s)
    if not m or sum(m["tokens_per_worker"]) != tp * (m["choices"] - m["dropped"]) or \
       sum(map(sum, m["tokens_per_expert"])) != m["choices"] - m["dropped"]:
        print("moe record of step", s, "inconsistent:", m); ok = False; break
print("%s: %-44s %d steps, worst relative loss difference %.2e, aux %.2e, routing %s, %d steps "
      "clipped, drops in %d steps, tokens per worker %s" %
      ("ok" if ok else "FAIL", what, len(steps), worst, waux, "same" if route else "DIFFERS",
       clipped, drops, moe[steps[-1]]["tokens_per_worker"]))
sys.exit(0 if ok else 1)
EOF
}

# memcheck FILE N EP ZERO: every worker's model state within 5 % of the formula: the dense
# parameters under ZeRO over N, the experts (E / ep of them per worker) over N / ep.
memcheck() {
    if $PY - "$1" "$2" "$3" "$4" <<'EOF'; then :; else fail "memory records $1"; fi
import json, sys
path, n, ep, zero = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
mem = [r for r in map(json.loads, open(path)) if r.get("type") == "memory"]
def f(psi, n):
    return {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[zero]
ok = len(mem) == n
for r in mem:
    want = f(r["psi_tp"], n) + f(r["psi_experts"], n // ep)
    st = r["params"] + r["grads"] + r["optimizer"]
    ok &= abs(st - want) <= 0.05 * want and r["psi_experts"] > 0
print("%s: memory N=%d ep=%d ZeRO-%d: %d records, model state %s vs formula %.0f" %
      ("ok" if ok else "FAIL", n, ep, zero, len(mem), [r["params"] + r["grads"] + r["optimizer"]
                                                       for r in mem], want))
sys.exit(0 if ok else 1)
EOF
}

# predcheck FILE: every worker's memory record equal to the memory model's prediction.
predcheck() {
    if $PY - "$1" <<'EOF'; then :; else fail "memory predictions $1"; fi
import json, sys
mem = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "memory"]
ok = len(mem) > 0
for r in mem:
    p = r.get("predicted", {})
    for k in ("params", "grads", "optimizer", "activations", "workspace", "comm"):
        if p.get(k) != r[k]:
            print("worker %d: %s allocated %d, predicted %s" % (r["worker"], k, r[k], p.get(k)))
            ok = False
print("%s: %s: %d workers' memory predicted == allocated (comm %s)" %
      ("ok" if ok else "FAIL", sys.argv[1].split("/")[-1], len(mem), [r["comm"] for r in mem]))
sys.exit(0 if ok else 1)
EOF
}

# bitwise REF.jsonl OTHER.jsonl "what": every step's loss, aux_loss and grad_norm the same.
bitwise() {
    if $PY - "$1" "$2" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def recs(p):
    return [(r["step"], r["loss"], r["aux_loss"], r["grad_norm"])
            for r in map(json.loads, open(p)) if r.get("type") == "train"]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
ok = len(a) == 10 and a == b
print("%s: %-52s %d steps bitwise (loss %.8f, aux %.8f at the end)" %
      ("ok" if ok else "FAIL", sys.argv[3], len(b), b[-1][1] if b else 0, b[-1][2] if b else 0))
sys.exit(0 if ok else 1)
EOF
}

# layout KIND RANKS DEVICES_PER_RANK DP EP ZERO: one expert-parallel layout against the reference
layout() {
    name="${1}_dp${4}_ep${5}_z${6}"
    train "$name" "$2" "$3" --dp "$4" --ep "$5" --zero "$6" &&
        compare_moe "$D/ref.jsonl" "$D/$name.jsonl" "$1 ${2}x${3} dp $4 ep $5 ZeRO-$6" &&
        memcheck "$D/$name.jsonl" "$4" "$5" "$6" && predcheck "$D/$name.jsonl"
}

# layouts KIND RANKS DEVICES_PER_RANK [SKIP]: dp 2 ep 2, dp 4 ep 4, dp 4 ep 2, each ZeRO 0 and 1
# (those with dp = RANKS x DEVICES_PER_RANK), but the one named SKIP (e.g. "dp4_ep2_z1")
layouts() {
    lr_kind=$1 lr_n=$2 lr_dpr=$3 lr_skip=${4:-}
    for shape in "2 2" "4 4" "4 2"; do
        set -- $shape
        [ $((lr_n * lr_dpr)) -eq "$1" ] || continue
        for z in 0 1; do
            [ "dp${1}_ep${2}_z${z}" = "$lr_skip" ] || layout "$lr_kind" "$lr_n" "$lr_dpr" "$1" "$2" "$z"
        done
    done
}

# ZeRO-2 and 3 with experts (issue 30), 20 steps: dp 2 (ep 2: each worker's experts its own, the
# shard all of them) and dp 4 (ep 2: the experts sharded over the 2 workers holding the same
# ones) against the single device, as threads, ranks and mixed; with a pipeline (dp 2 (ep 2) x
# pp 2) and with TP and SP (tp 2 x dp 2 (ep 2)); the memory records (model state by the formula,
# predicted == allocated). The per-group bytes: test_engine_zero_bytes.
if want zero23; then
    need_ref ref20 --steps 20
    zlayout() {
        name="${1}_dp${4}_ep${5}_z${6}"
        train "$name" "$2" "$3" --dp "$4" --ep "$5" --zero "$6" --steps 20 &&
            compare_moe "$D/ref20.jsonl" "$D/$name.jsonl" "$1 ${2}x${3} dp $4 ep $5 ZeRO-$6" &&
            memcheck "$D/$name.jsonl" "$4" "$5" "$6" && predcheck "$D/$name.jsonl"
    }
    zlayout threads 1 2 2 2 3
    zlayout threads 1 2 2 2 2
    zlayout ranks 2 1 2 2 3
    zlayout threads 1 4 4 2 3
    zlayout mixed 2 2 4 2 2
    train pp2z3 1 4 --pp 2 --dp 2 --ep 2 --zero 3 --steps 20 &&
        compare_moe "$D/ref20.jsonl" "$D/pp2z3.jsonl" "threads dp 2 (ep 2) x pp 2 ZeRO-3" &&
        predcheck "$D/pp2z3.jsonl"
    train tpz3 2 2 --tp 2 --dp 2 --ep 2 --sequence-parallel 1 --zero 3 --steps 20 &&
        compare_moe "$D/ref20.jsonl" "$D/tpz3.jsonl" "mixed tp 2 x dp 2 (ep 2) SP ZeRO-3" 0 2 &&
        predcheck "$D/tpz3.jsonl"
fi
if want threads; then
    need_ref
    layouts threads 1 2
    layouts threads 1 4
    train pp2 1 2 --pp 2 && compare_moe "$D/ref.jsonl" "$D/pp2.jsonl" "threads pp 2" &&
        predcheck "$D/pp2.jsonl"
    train pp2dp2 1 4 --pp 2 --dp 2 --ep 2 --zero 1 &&
        compare_moe "$D/ref.jsonl" "$D/pp2dp2.jsonl" "threads dp 2 (ep 2) x pp 2 ZeRO-1" &&
        predcheck "$D/pp2dp2.jsonl"
fi
if want ranks; then
    need_ref
    layouts ranks 2 1
    layouts ranks 4 1
fi
if want mixed; then
    need_ref
    layouts mixed 2 2 dp4_ep2_z1
fi
if want ep; then
    need_ref
    layout mixed 2 2 4 2 1
fi
if want resume; then
    need_ref
    if train w4 1 4 --dp 4 --ep 2 --zero 1 --save "$D/ck" --save-every 5; then
        train res1 1 1 --resume "$D/ck/ckpt_00000005.bin" &&
            compare_moe "$D/ref.jsonl" "$D/res1.jsonl" "resume dp 4 ep 2 ZeRO-1 -> 1 device" 5
        train res2 1 2 --dp 2 --ep 2 --resume "$D/ck/ckpt_00000005.bin" &&
            compare_moe "$D/ref.jsonl" "$D/res2.jsonl" "resume -> threads dp 2 ep 2" 5
        train res4 4 1 --dp 4 --ep 4 --zero 1 --resume "$D/ck/ckpt_00000005.bin" &&
            compare_moe "$D/ref.jsonl" "$D/res4.jsonl" "resume -> ranks dp 4 ep 4 ZeRO-1" 5
    fi
fi
if want files; then
    # an expert-parallel run's model, with evaluation and samples (collective under EP)
    if train f1 1 2 --dp 2 --ep 2 --steps 4 --eval-every 2 --sample-len 8 \
           --sample-every 2 --save-model "$D/moe.safetensors"; then
        if grep -q "val loss" "$D/f1.log" && grep -q -- "---- sample at step 2" "$D/f1.log"; then
            echo "ok: evaluation and sampling under expert parallelism"
        else
            fail "ep 2: evaluation or sampling output missing"; tail -n 5 "$D/f1.log"
        fi
        if $PY - "$D/moe.safetensors" <<'EOF'; then :; else fail "python reading moe.safetensors"; fi
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
meta = head.pop("__metadata__")
t = {k: np.frombuffer(raw, "<f4", (v["data_offsets"][1] - v["data_offsets"][0]) // 4,
                      8 + n + v["data_offsets"][0]).reshape(v["shape"]) for k, v in head.items()}
ok = meta["format"] == "cltrain-gpt" and meta["experts"] == "4" and meta["top_k"] == "2"
ok &= t["fcw"].shape == (2, 4, 128, 32) and t["routerw"].shape == (2, 4, 32)
ok &= t["fcprojb"].shape == (2, 4, 32) and all(np.isfinite(a).all() for a in t.values())
ok &= len(raw) == 8 + n + sum(a.size * 4 for a in t.values())
print("%s: python reads moe.safetensors with json + numpy: %d tensors, fcw %s, metadata %s" %
      ("ok" if ok else "FAIL", len(t), t["fcw"].shape, meta))
sys.exit(0 if ok else 1)
EOF
        # --init from it, save again: the same bytes
        train f2 1 1 --init "$D/moe.safetensors" --steps 0 --save-model "$D/moe2.safetensors" &&
            if cmp -s "$D/moe.safetensors" "$D/moe2.safetensors"; then
                echo "ok: --init moe.safetensors then --save-model gives the same bytes"
            else fail "moe safetensors round trip changed the file"; fi
    fi
    # a dense model in both formats
    DENSE="--experts 0"
    if train d1 1 1 $DENSE --steps 3 --save-model "$D/dense.safetensors" &&
       train d2 1 1 $DENSE --steps 3 --save-model "$D/dense.bin"; then
        train d3 1 1 $DENSE --init "$D/dense.safetensors" --steps 0 --save-model "$D/dense2.bin" &&
            if cmp -s "$D/dense.bin" "$D/dense2.bin"; then
                echo "ok: a dense model: safetensors -> --init -> llm.c file, the same bytes"
            else fail "dense safetensors -> llm.c changed the parameters"; fi
        if $PY - "$D/dense.safetensors" "$D/dense.bin" <<'EOF'; then :; else fail "python dense"; fi
import json, struct, sys
import numpy as np
def load_file(path):  # safetensors.numpy.load_file's result, in ten lines of json + numpy
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return {k: np.frombuffer(raw, "<f4", (v["data_offsets"][1] - v["data_offsets"][0]) // 4,
                             8 + n + v["data_offsets"][0]).reshape(v["shape"])
            for k, v in head.items()}
t = load_file(sys.argv[1])
flat = np.fromfile(sys.argv[2], "<f4", offset=1024)
order = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
ok = sorted(t) == sorted(order) and np.array_equal(np.concatenate([t[k].ravel() for k in order]), flat)
print("%s: a dense safetensors file read in python equals the llm.c file (%d floats)" %
      ("ok" if ok else "FAIL", flat.size))
sys.exit(0 if ok else 1)
EOF
    fi
    # damaged files: refused, naming the tensor or field
    $PY - "$D/moe.safetensors" "$D" <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = raw[8 + n:]
def write(name, h, d=data, text=None):
    b = (text if text is not None else json.dumps(h)).encode()
    open("%s/%s.safetensors" % (sys.argv[2], name), "wb").write(struct.pack("<Q", len(b)) + b + d)
def edit(f):
    h = json.loads(json.dumps(head)); f(h); return h
write("notjson", None, text=json.dumps(head)[:-5] + " ,}")
write("missing", edit(lambda h: h.pop("qkvb")))
write("shape", edit(lambda h: h["fcw"].__setitem__("shape", [2, 4, 32, 128])))
write("dtype", edit(lambda h: h["lnfw"].__setitem__("dtype", "F16")))
write("overlap", edit(lambda h: h["lnfb"].__setitem__("data_offsets", h["lnfw"]["data_offsets"])))
write("range", edit(lambda h: h["lnfb"].__setitem__("data_offsets", [len(data) - 64, len(data) + 64])))
write("meta", edit(lambda h: h["__metadata__"].pop("top_k")))
EOF
    bad_file() {
        expect_refusal "$1" "$2" "$TRAIN" $ARGS --init "$D/$1.safetensors" --metrics "$D/bad.jsonl"
    }
    bad_file notjson "not valid JSON"
    bad_file missing 'tensor "qkvb"'
    bad_file shape 'tensor "fcw" has shape (2, 4, 32, 128)'
    bad_file dtype 'tensor "lnfw" has dtype F16'
    bad_file overlap 'overlap'
    bad_file range 'tensor "lnfb": data_offsets'
    bad_file meta '"top_k"'
fi
if want refuse; then
    refused "ep not dividing dp" "--ep 3 does not divide --dp 4" 1 4 --dp 4 --ep 3 --devices-per-rank 4
    refused "ep not dividing E" "--ep 4 does not divide the 6 experts" 1 4 --dp 4 --ep 4 --experts 6 --devices-per-rank 4
    refused "ep without experts" "--ep needs a mixture of experts" 1 2 --dp 2 --ep 2 --experts 0 --devices-per-rank 2
    refused "top-k above E" "--top-k 5 is above --experts 4" 1 1 --top-k 5
    refused "top-k 0" "--top-k must be >= 1" 1 1 --top-k 0
    refused "negative capacity" "--capacity-factor must be >= 0" 1 1 --capacity-factor -1
    refused "negative aux" "--aux-loss must be >= 0" 1 1 --aux-loss -0.5
    refused "experts with zb1" "experts with --schedule zb1 are not built" 1 2 --pp 2 --schedule zb1 --devices-per-rank 2
    refused "experts into an llm.c file" "llm.c's model format has no place for experts" 1 1 --save-model "$D/x.bin"
    refused "ranks: ep not dividing dp" "--ep 4 does not divide --dp 2" 2 1 --dp 2 --ep 4
fi

if want tp; then
    need_ref
    train tp2 1 2 --tp 2 &&
        compare_moe "$D/ref.jsonl" "$D/tp2.jsonl" "threads tp 2" 0 2 && predcheck "$D/tp2.jsonl"
    train tp2sp 2 1 --tp 2 --sequence-parallel 1 &&
        compare_moe "$D/ref.jsonl" "$D/tp2sp.jsonl" "ranks tp 2 SP" 0 2 && predcheck "$D/tp2sp.jsonl"
    # the two TP workers on one device: TP's collectives (the router's too) stay on the device
    train tp2d 1 2 --tp 2 --sequence-parallel 1 --workers-per-device 2 --tp-comm device &&
        compare_moe "$D/ref.jsonl" "$D/tp2d.jsonl" "threads tp 2 SP on one device" 0 2 &&
        logsays "$D/tp2d.log" "collectives on the device" && predcheck "$D/tp2d.jsonl"
    if train tp2dp2 1 4 --tp 2 --dp 2 --ep 2 --zero 1 --save "$D/cktp" \
            --save-every 5; then
        compare_moe "$D/ref.jsonl" "$D/tp2dp2.jsonl" "threads tp 2 x dp 2 (ep 2) ZeRO-1" 0 2 &&
            predcheck "$D/tp2dp2.jsonl"
        train tpres 1 2 --dp 2 --ep 2 --resume "$D/cktp/ckpt_00000005.bin" &&
            compare_moe "$D/ref.jsonl" "$D/tpres.jsonl" "resume tp 2 x dp 2 (ep 2) -> dp 2 (ep 2)" 5
    fi
    if train tp2dp2sp 2 2 --tp 2 --dp 2 --ep 2 --sequence-parallel 1; then
        compare_moe "$D/ref.jsonl" "$D/tp2dp2sp.jsonl" "mixed 2x2 tp 2 x dp 2 (ep 2) SP" 0 2 &&
            predcheck "$D/tp2dp2sp.jsonl"
        # recomputation under TP with experts: the recomputed forward repeats the SP gathers
        for mode in attention block; do
            train "tp2dp2sp_$mode" 2 2 --tp 2 --dp 2 --ep 2 --sequence-parallel 1 \
                --recompute "$mode" &&
                bitwise "$D/tp2dp2sp.jsonl" "$D/tp2dp2sp_$mode.jsonl" "mixed tp 2 x dp 2 (ep 2) SP, recompute $mode" &&
                predcheck "$D/tp2dp2sp_$mode.jsonl"
        done
    fi
    # more choices per token than channels (K = 6 of 8 experts, C = 4): the gates' gradients
    # summed over TP (B T K floats) outgrow a (B,T,C) activation in the TP staging
    KC="--dim 4 --experts 8 --top-k 6"
    train refkc 1 1 $KC && train tpkc 1 2 $KC --tp 2 &&
        compare_moe "$D/refkc.jsonl" "$D/tpkc.jsonl" "threads tp 2, top-6 of 8 experts at C = 4" 0 2 &&
        predcheck "$D/tpkc.jsonl"
fi

if want recompute; then
    need_ref
    for mode in attention block; do
        train "rc1_$mode" 1 1 --recompute "$mode" &&
            bitwise "$D/ref.jsonl" "$D/rc1_$mode.jsonl" "one device, recompute $mode" &&
            predcheck "$D/rc1_$mode.jsonl"
    done
    # rc_layout NAME WHAT RANKS DEVICES_PER_RANK args: the none run, then attention and block
    rc_layout() {
        nm=$1; what=$2; nr=$3; dpr=$4; shift 4
        train "${nm}_none" "$nr" "$dpr" "$@" || return
        for mode in attention block; do
            train "${nm}_$mode" "$nr" "$dpr" "$@" --recompute "$mode" &&
                bitwise "$D/${nm}_none.jsonl" "$D/${nm}_$mode.jsonl" "$what, recompute $mode" &&
                predcheck "$D/${nm}_$mode.jsonl"
        done
    }
    rc_layout thr "threads dp 4 (ep 2) ZeRO-1" 1 4 --dp 4 --ep 2 --zero 1
    rc_layout rk "ranks dp 2 (ep 2)" 2 1 --dp 2 --ep 2
    rc_layout pp "threads pp 2 (1F1B)" 1 2 --pp 2 --schedule 1f1b
fi

finish
