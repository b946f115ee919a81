#!/bin/sh
# test_engine_bf16.sh TRAIN_GPT MPIEXEC [part] - training in bf16 on one device (issue 27, the
# model's slice) through train_gpt, against the fp32 run of the same flags.
#
# 1. "converge": the tiny GPT of the issue (L 4, NH 4, C 128; B 4, T 16 to fit this machine's
#    budget) trained 300 steps in fp32 and in bf16 from the same init and data (a text of
#    random words, so the loss has a floor well above 0): every bf16 loss finite, the mean of
#    bf16's last 50 losses within 2 % of fp32's, and the two runs not bitwise equal (bf16 did
#    run: its rounding shows in the losses).
# 2. "memory": at the same shape, for the GEMM and the fused attention path and with experts
#    (4, top-2: the MoE layer's activation regions and staging halve too), every memory record
#    predicted == allocated in every category; bf16's activation bytes at most 0.55x fp32's;
#    bf16's parameter bytes fp32's plus the bf16 working copy (2 bytes a parameter, 1.5x).
#    --recompute block and attention (the GEMM path: the probabilities recomputed with their
#    fp32 scores in the attention's scratch) in bf16 give bitwise the losses and norms of
#    --recompute none in bf16 (the recomputed forward runs the same bf16 kernels on the same
#    inputs).
# 3. "dp": data parallelism in bf16 (dp 2 as threads with ZeRO-1, as ranks with ZeRO-2;
#    "zero3": ZeRO-3 as both; batch 8 split 4 + 4) reproduces the single-device bf16 run (batch 8) within 5e-3 relative on
#    every step's loss over 20 steps (clipping on); the gradients reduce in fp32, the working
#    copy is made after ZeRO's all-gather (ZeRO-3: from each gathered range, on the device).
# 4. "tp": tensor parallelism in bf16 (tp 2 as threads, with SP as ranks, device-resident as two
#    workers on one device, tp 2 x dp 2 mixed) within 5e-3 relative of the single-device bf16 run
#    on every step's loss over 20 steps; the TP group's bytes (comm_tp_bytes, summed over the
#    steps) 0.49x to 0.51x fp32's at the same layout: bf16 activations cross the link (the loss's
#    row maxima and sums stay fp32: 3 x B x T floats a step, the 0.001 above one half).
# 5. "pp", "pp_zb": pipeline parallelism in bf16, pp 2 with every schedule (gpipe, 1f1b as
#    threads; "pp_zb": zb1 as threads, interleaved with 2 virtual stages as ranks; 4 micro-batches of 2 rows) within 5e-3 relative of the single-device bf16 run of the same total batch on every
#    step's loss over 20 steps; the pipeline's bytes (comm_pp_bytes, worker 0's sends) 0.49x to
#    0.51x fp32's (exactly one half: activations cross as bf16).
# 6. "ep": experts in bf16 (4 experts, top-2): ep 2 x dp 2 as threads and as ranks within 5e-3
#    relative of the single-device bf16 run of the same model; the EP group's bytes
#    (comm_ep_bytes) 0.49x to 0.51x fp32's (rows cross as bf16; the routing counts stay int32).
#    "mixed_pp", "mixed_ep": ranks x threads (2 x 2): pp 2 1f1b x dp 2; ep 2 x tp 2 x dp 2 with
#    experts; each against its single-device bf16 run as above.
# 7. "grad_reduce": --grad-reduce bf16 (buckets cross as bf16, summed in fp32 on arrival): dp 2
#    threads (all-reduce) and dp 2 ranks ZeRO-1 (reduce-scatter with per-rank counts) in bf16;
#    "grad_reduce_odd": dp 3 ranks ZeRO-1 (odd blocks and parts: the padded pairs; batch 6) within 5e-3 relative
#    of the single-device bf16 run over 20 steps, and dp 2 ranks in fp32
#    within 5e-3 of the fp32 single-device run; the DP group's bytes (comm_dp_bytes) of the
#    all-reduce 0.49x to 0.51x --grad-reduce fp32's (the step's loss and norm stay fp32: a few
#    bytes); the memory records predicted == allocated (the wire's scratch counted).
# 8. "resume": a bf16 run of 10 steps saving at step 5, and its resume from that checkpoint:
#    steps 5 to 9 give bitwise the uninterrupted run's losses and norms, with --bf16-round
#    nearest and stochastic (the working copy rounded again at resume as after step 5), on one
#    device and as dp 2 threads ZeRO-1; stochastic's losses differ from nearest's (it ran).
# 9. "plan": ct_plan (4 workers, compute timed here, the default link model) with --precision
#    fp32, bf16, and bf16 with --grad-reduce bf16: bf16 ranks every fp32 layout
#    and no other; on each, its activations at most 0.55x fp32's, its
#    predicted TP bytes 0.49x to 0.51x and PP bytes 0.5x fp32's, its DP bytes fp32's; with
#    --grad-reduce bf16 the DP bytes 0.5x (ZeRO 0) or 0.75x (ZeRO 1, 2: the fp32 gather stays;
#    ZeRO-3: below fp32's).
# 10. "refuse": status 2 and a message naming --precision bf16 and the axis before any work, for
#    ep with an odd --dim (bf16 rows cross as 4-byte pairs); an unknown
#    precision, --grad-reduce and --bf16-round.
# 11. "mma": the fused attention's mma variant (attention_mma.cl, here through the portable
#    stand-ins: --gemm mma-emulated picks it, the start-up line says so) trains 10 steps within
#    5e-3 relative of the scalar fused kernel's bf16 losses (--gemm portable, whose start-up line
#    names no mma variant), every step; the two differ in the GEMM path too (both bf16
#    operands, fp32 accumulation), so the bound covers both; not bitwise equal (the variant ran).
# part: "all" (default), "converge", "memory", "dp", "zero3", "tp", "pp", "pp_zb", "ep", "mixed_pp",
# "mixed_ep", "grad_reduce", "grad_reduce_odd",
# "resume", "plan", "refuse", "mma".
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

# random words: 20 of them, a full stop now and then (awk's seeded generator: the same file on
# every run of this machine's awk; both precisions read the same file in any case)
awk 'BEGIN { srand(7); split("the quick brown fox jumps over a lazy dog while seven old cats " \
     "sleep under warm red blankets and birds sing", w, " ");
     for (i = 0; i < 30000; i++) printf "%s%s", w[int(rand() * 20) + 1], (rand() < 0.1 ? ". " : " ") }' \
    >"$D/words.txt"
ARGS="--layers 4 --heads 4 --dim 128 --seq 16 --batch 4 --lr 1e-3 --text $D/words.txt \
      --sample-len 0 --eval-every 0 --log-every 50 --peak-tflops 1"

if want converge; then
    train conv_fp32 1 1 --steps 300 --precision fp32 &&
        train conv_bf16 1 1 --steps 300 --precision bf16 &&
        if $PY - "$D/conv_fp32.jsonl" "$D/conv_bf16.jsonl" <<'EOF'; then :; else fail "converge"; fi
import json, math, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
f, b = losses(sys.argv[1]), losses(sys.argv[2])
ok = len(f) == 300 and len(b) == 300
if not ok: print("steps: fp32 %d, bf16 %d (300 each expected)" % (len(f), len(b)))
bad = [s for s in sorted(b) if not math.isfinite(b[s])]
if bad: print("bf16: non-finite loss at steps %s" % bad[:10]); ok = False
last = sorted(f)[-50:]
mf = sum(f[s] for s in last) / 50
mb = sum(b.get(s, float("nan")) for s in last) / 50
rel = abs(mb - mf) / mf
if not rel <= 0.02: print("mean of the last 50 losses: bf16 %.6f, fp32 %.6f, %.2f %% apart (2 %% allowed)" % (mb, mf, 100 * rel)); ok = False
if f == b: print("bf16's losses equal fp32's bitwise: bf16 did not run"); ok = False
if ok:
    print("ok: 300 steps, loss %.4f -> %.4f; mean of the last 50: fp32 %.6f, bf16 %.6f (%.3f %% apart)"
          % (b[min(b)], b[max(b)], mf, mb, 100 * rel))
sys.exit(0 if ok else 1)
EOF
fi

# mem FP32 BF16 WHAT: predictions equal allocations in both runs; bf16's activations <= 0.55x
# fp32's; its params fp32's x 1.5 (the working copy).
mem() {
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def rec(p):
    m = [r for r in map(json.loads, open(p)) if r.get("type") == "memory"]
    return m[0] if m else None
f, b, what = rec(sys.argv[1]), rec(sys.argv[2]), sys.argv[3]
ok = f is not None and b is not None
if not ok: print("%s: no memory record" % what); sys.exit(1)
for name, r in (("fp32", f), ("bf16", b)):
    p = r.get("predicted", {})
    for k in ("params", "grads", "optimizer", "activations", "workspace", "comm"):
        if p.get(k) != r[k]:
            print("%s %s: %s allocated %d, predicted %s" % (what, name, k, r[k], p.get(k))); ok = False
ratio = b["activations"] / f["activations"]
if not ratio <= 0.55:
    print("%s: activations bf16 %d, fp32 %d: %.3fx (0.55x allowed)" % (what, b["activations"], f["activations"], ratio)); ok = False
if 2 * b["params"] != 3 * f["params"]:
    print("%s: params bf16 %d, fp32 %d: not the master plus a 2-byte working copy (1.5x)" % (what, b["params"], f["params"])); ok = False
if b["grads"] != f["grads"] or b["optimizer"] != f["optimizer"]:
    print("%s: gradients or optimizer state differ from fp32's (they stay fp32)" % what); ok = False
if ok:
    print("ok: %-10s activations %d -> %d bytes (%.3fx), params %d -> %d, predicted == allocated"
          % (what, f["activations"], b["activations"], ratio, f["params"], b["params"]))
sys.exit(0 if ok else 1)
EOF
}

if want memory; then
    for path in gemm fused; do
        train mem_fp32_$path 1 1 --steps 2 --attention $path --precision fp32 &&
            train mem_bf16_$path 1 1 --steps 2 --attention $path --precision bf16 &&
            mem mem_fp32_$path mem_bf16_$path "$path"
    done
    train mem_fp32_moe 1 1 --steps 2 --experts 4 --top-k 2 --precision fp32 &&
        train mem_bf16_moe 1 1 --steps 2 --experts 4 --top-k 2 --precision bf16 &&
        mem mem_fp32_moe mem_bf16_moe "experts"
    train rc_none 1 1 --steps 10 --precision bf16 &&
        for rc in block attention; do
            train rc_$rc 1 1 --steps 10 --precision bf16 --recompute $rc &&
                if $PY - "$D/rc_none.jsonl" "$D/rc_$rc.jsonl" $rc <<'EOF'; then :; else fail "bf16 recompute $rc"; fi
import json, sys
def tr(p):
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b = tr(sys.argv[1]), tr(sys.argv[2])
if len(a) != 10 or a != b:
    print("bf16: --recompute %s's losses differ from none's" % sys.argv[3])
    for s in sorted(a): print(" ", s, a[s], b.get(s))
    sys.exit(1)
print("ok: bf16 --recompute %s: 10 steps bitwise those of none" % sys.argv[3])
EOF
        done
fi

# near REF OTHER WHAT: every step's loss of REF in OTHER within 5e-3 relative.
near() {
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def tr(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b, what = tr(sys.argv[1]), tr(sys.argv[2]), sys.argv[3]
worst = max((abs(b[s] - a[s]) / abs(a[s]) if s in b else float("inf")) for s in a) if a else float("inf")
if len(a) != 20 or not worst <= 5e-3:
    print("%s: %d steps, worst relative difference %.3g (5e-3 allowed)" % (what, len(a), worst))
    for s in sorted(a): print(" ", s, a[s], b.get(s))
    sys.exit(1)
print("ok: %-28s 20 steps within %.2g of the single-device run" % (what, worst))
EOF
}

DPA="--steps 20 --batch 8 --grad-clip 0.3 --log-every 1 --precision bf16"
if want dp; then
    need_ref dp_ref $DPA
    train dp_threads_z1 1 2 $DPA --dp 2 --zero 1 &&
        near dp_ref dp_threads_z1 "dp 2 threads ZeRO-1" &&
        train dp_ranks_z2 2 1 $DPA --dp 2 --zero 2 && near dp_ref dp_ranks_z2 "dp 2 ranks ZeRO-2"
fi
if want zero3; then
    need_ref dp_ref $DPA
    # ZeRO-3: each gathered fp32 range converted to bf16 where it lands (the memory model counts
    # the working copy in the working buffer's layout: predicted == allocated)
    for kind in "threads 1 2" "ranks 2 1"; do
        set -- $kind
        train dp_$1_z3 "$2" "$3" $DPA --dp 2 --zero 3 && near dp_ref dp_$1_z3 "dp 2 $1 ZeRO-3" &&
            if $PY - "$D/dp_$1_z3.jsonl" <<'EOF'; then :; else fail "bf16 ZeRO-3 memory records"; fi
import json, sys
mem = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "memory"]
bad = [(r["worker"], k) for r in mem for k in ("params", "grads", "optimizer", "activations",
       "workspace", "comm") if r.get("predicted", {}).get(k) != r[k]]
print("%s: bf16 ZeRO-3: %d workers' memory predicted == allocated%s" %
      ("ok" if mem and not bad else "FAIL", len(mem), " but " + str(bad) if bad else ""))
sys.exit(0 if mem and not bad else 1)
EOF
    done
fi

# halved REF_FP32 BF16 GROUP WHAT: the sum over the steps of BF16's comm_GROUP_bytes 0.49x to
# 0.51x REF_FP32's.
halved() {
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" "$4" <<'EOF'; then :; else fail "$4 bytes"; fi
import json, sys
def total(p, g):
    v = [r.get("comm_%s_bytes" % g) for r in map(json.loads, open(p)) if r.get("type") == "train"]
    return sum(v) if v and None not in v else None
f, b = total(sys.argv[1], sys.argv[3]), total(sys.argv[2], sys.argv[3])
if not f or b is None or not 0.49 <= b / f <= 0.51:
    print("%s: comm_%s_bytes fp32 %s, bf16 %s (0.49x to 0.51x expected)" % (sys.argv[4], sys.argv[3], f, b))
    sys.exit(1)
print("ok: %-28s comm_%s_bytes %d -> %d (%.4fx)" % (sys.argv[4], sys.argv[3], f, b, b / f))
EOF
}

LAY="--steps 20 --batch 8 --grad-clip 0.3 --log-every 1"
if want tp; then
    train lay_ref 1 1 $LAY --precision bf16 &&
        train tp_threads 1 2 $LAY --precision bf16 --tp 2 &&
        near lay_ref tp_threads "tp 2 threads" &&
        train tp_threads_fp32 1 2 $LAY --precision fp32 --tp 2 &&
        halved tp_threads_fp32 tp_threads tp "tp 2 threads"
    train tp_ranks_sp 2 1 $LAY --precision bf16 --tp 2 --sequence-parallel 1 &&
        near lay_ref tp_ranks_sp "tp 2 ranks SP" &&
        train tp_ranks_sp_fp32 2 1 $LAY --precision fp32 --tp 2 --sequence-parallel 1 &&
        halved tp_ranks_sp_fp32 tp_ranks_sp tp "tp 2 ranks SP"
    train tp_device 1 2 $LAY --precision bf16 --tp 2 --workers-per-device 2 --tp-comm device \
        --sequence-parallel 1 && near lay_ref tp_device "tp 2 device-resident SP"
    train tp_mixed 2 2 $LAY --precision bf16 --tp 2 --dp 2 --zero 1 &&
        near lay_ref tp_mixed "tp 2 x dp 2 ranks x threads"
fi

PPA="--steps 20 --batch 2 --total-batch 128 --grad-clip 0.3 --log-every 1"
if want pp; then
    train pp_ref 1 1 $PPA --precision bf16
    for s in gpipe 1f1b; do
        train pp_$s 1 2 $PPA --precision bf16 --pp 2 --schedule $s &&
            near pp_ref pp_$s "pp 2 $s threads"
    done
    train pp_1f1b_fp32 1 2 $PPA --precision fp32 --pp 2 --schedule 1f1b &&
        halved pp_1f1b_fp32 pp_1f1b pp "pp 2 1f1b threads"
fi
if want pp_zb; then
    train pp_ref 1 1 $PPA --precision bf16
    train pp_zb1 1 2 $PPA --precision bf16 --pp 2 --schedule zb1 &&
        near pp_ref pp_zb1 "pp 2 zb1 threads"
    train pp_interleaved 2 1 $PPA --precision bf16 --pp 2 --schedule interleaved \
        --virtual-stages 2 && near pp_ref pp_interleaved "pp 2 interleaved ranks"
fi

EPA="--steps 20 --batch 8 --grad-clip 0.3 --log-every 1 --experts 4 --top-k 2"
if want ep; then
    train ep_ref 1 1 $EPA --precision bf16 &&
        train ep_threads 1 2 $EPA --precision bf16 --dp 2 --ep 2 &&
        near ep_ref ep_threads "ep 2 threads" &&
        train ep_threads_fp32 1 2 $EPA --precision fp32 --dp 2 --ep 2 &&
        halved ep_threads_fp32 ep_threads ep "ep 2 threads"
    train ep_ranks 2 1 $EPA --precision bf16 --dp 2 --ep 2 && near ep_ref ep_ranks "ep 2 ranks"
fi
if want mixed_pp; then
    train pp_ref 1 1 $PPA --precision bf16 &&
        train pp_mixed 2 2 $PPA --precision bf16 --pp 2 --dp 2 --schedule 1f1b &&
        near pp_ref pp_mixed "pp 2 x dp 2 ranks x threads"
fi
if want mixed_ep; then
    train ep_ref 1 1 $EPA --precision bf16 &&
        train ep_tp_mixed 2 2 $EPA --precision bf16 --dp 2 --ep 2 --tp 2 &&
        near ep_ref ep_tp_mixed "ep 2 x tp 2 ranks x threads"
fi

if want grad_reduce; then
    DPA="--steps 20 --batch 8 --grad-clip 0.3 --log-every 1"
    train gr_ref 1 1 $DPA --precision bf16 &&
        train gr_threads 1 2 $DPA --precision bf16 --dp 2 --grad-reduce bf16 &&
        near gr_ref gr_threads "grad-reduce bf16 dp 2 threads" &&
        train gr_threads_fp32 1 2 $DPA --precision bf16 --dp 2 --grad-reduce fp32 &&
        halved gr_threads_fp32 gr_threads dp "grad-reduce bf16 dp 2 threads" &&
        if $PY - "$D/gr_threads.jsonl" <<'EOF'; then :; else fail "grad-reduce bf16 memory"; fi
import json, sys
m = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "memory"]
bad = [(r["worker"], k) for r in m for k in ("params", "grads", "optimizer", "activations", "workspace", "comm") if r[k] != r["predicted"][k]]
if not m or bad: print("grad-reduce bf16: predicted != allocated:", bad or "no memory record"); sys.exit(1)
print("ok: grad-reduce bf16: %d memory records, predicted == allocated" % len(m))
EOF
    train gr_ranks_z1 2 1 $DPA --precision bf16 --dp 2 --zero 1 --grad-reduce bf16 &&
        near gr_ref gr_ranks_z1 "grad-reduce bf16 dp 2 ranks ZeRO-1"
fi
if want grad_reduce_odd; then
    DPA="--steps 20 --batch 8 --grad-clip 0.3 --log-every 1"
    train gr_ref6 1 1 $DPA --batch 6 --precision bf16 &&
        train gr_ranks3 3 1 $DPA --batch 6 --precision bf16 --dp 3 --zero 1 --grad-reduce bf16 &&
        near gr_ref6 gr_ranks3 "grad-reduce bf16 dp 3 ranks ZeRO-1"
    train gr_ref_fp32 1 1 $DPA --precision fp32 &&
        train gr_ranks_fp32 2 1 $DPA --precision fp32 --dp 2 --grad-reduce bf16 &&
        near gr_ref_fp32 gr_ranks_fp32 "grad-reduce bf16 fp32 dp 2 ranks"
fi

# same_tail FULL RESUMED WHAT: RESUMED's steps (5 to 9) bitwise FULL's, losses and norms.
same_tail() {
    if $PY - "$D/$1.jsonl" "$D/$2.jsonl" "$3" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def tr(p):
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b, what = tr(sys.argv[1]), tr(sys.argv[2]), sys.argv[3]
if sorted(b) != list(range(5, 10)) or any(a.get(s) != b[s] for s in b):
    print("%s: the resumed steps differ from the uninterrupted run's" % what)
    for s in sorted(a): print(" ", s, a[s], b.get(s))
    sys.exit(1)
print("ok: %-34s steps 5-9 bitwise the uninterrupted run's" % what)
EOF
}

if want resume; then
    RSA="--steps 10 --log-every 1 --precision bf16"
    for r in nearest stochastic; do
        train rs_$r 1 1 $RSA --bf16-round $r --save "$D/ck_$r" --save-every 5 &&
            train rs_${r}_resumed 1 1 $RSA --bf16-round $r --resume "$D/ck_$r/ckpt_00000005.bin" &&
            same_tail rs_$r rs_${r}_resumed "resume, --bf16-round $r"
    done
    train rs_dp 1 2 $RSA --bf16-round stochastic --dp 2 --zero 1 --save "$D/ck_dp" --save-every 5 &&
        train rs_dp_resumed 1 2 $RSA --bf16-round stochastic --dp 2 --zero 1 \
            --resume "$D/ck_dp/ckpt_00000005.bin" &&
        same_tail rs_dp rs_dp_resumed "resume, stochastic, dp 2 ZeRO-1"
    if $PY - "$D/rs_nearest.jsonl" "$D/rs_stochastic.jsonl" <<'EOF'; then :; else fail "stochastic rounding ran"; fi
import json, sys
def tr(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b = tr(sys.argv[1]), tr(sys.argv[2])
if a == b: print("--bf16-round stochastic gave nearest's losses bitwise: it did not run"); sys.exit(1)
print("ok: stochastic and nearest differ (step 9: %.6f and %.6f)" % (b.get(9, float("nan")), a.get(9, float("nan"))))
EOF
fi

if want plan; then
    PLAN="$(dirname "$TRAIN")/ct_plan"
    for pr in fp32 bf16 bf16g; do
        extra="--precision ${pr%g}"
        [ "$pr" = bf16g ] && extra="$extra --grad-reduce bf16"
        logged "$D/plan_$pr.json" "$D/plan_$pr.err" launch 1 2 "$PLAN" --workers 4 \
            --devices-per-rank 2 --layers 4 --heads 4 --dim 128 --seq 16 --batch 8 \
            --text "$D/words.txt" --reps 1 --top 100 --json $extra ||
            { fail "ct_plan $extra"; tail -n 3 "$D/plan_$pr.err"; }
    done
    if $PY - "$D/plan_fp32.json" "$D/plan_bf16.json" "$D/plan_bf16g.json" <<'EOF'; then :; else fail "plan"; fi
import json, sys
def lay(p):
    try: return {l["name"]: l for l in json.load(open(p))["layouts"]}
    except Exception as e: print("%s: %s" % (p, e)); sys.exit(1)
f, b, g = (lay(p) for p in sys.argv[1:4])
ok = True
def bad(msg):
    global ok
    print(msg); ok = False
if set(b) != set(f) or set(g) != set(b):
    bad("layouts: fp32 %d, bf16 %d, bf16 + grad-reduce %d" % (len(f), len(b), len(g)))
timed = 0
for n in b:
    x, y, z = f[n], b[n], g[n]
    r = y["mem"]["activations"] / x["mem"]["activations"]
    if not r <= 0.55: bad("%s: activations %.3fx fp32's" % (n, r))
    if not (x["timed"] and y["timed"] and z["timed"]): continue
    timed += 1
    if x["tp_bytes"] and not 0.49 <= y["tp_bytes"] / x["tp_bytes"] <= 0.51: bad("%s: TP bytes %s of %s" % (n, y["tp_bytes"], x["tp_bytes"]))
    if y["pp_bytes"] * 2 != x["pp_bytes"]: bad("%s: PP bytes %s of %s" % (n, y["pp_bytes"], x["pp_bytes"]))
    if y["dp_bytes"] != x["dp_bytes"]: bad("%s: DP bytes %s, fp32 %s (grad-reduce fp32)" % (n, y["dp_bytes"], x["dp_bytes"]))
    want = 0.5 if x["zero"] == 0 else 0.75
    if x["zero"] >= 3:  # the fp32 gathers stay: less, by the reduce-scatter's half
        if x["dp"] > 1 and not z["dp_bytes"] < y["dp_bytes"]:
            bad("%s: grad-reduce bf16 DP bytes %s, not below fp32's %s" % (n, z["dp_bytes"], y["dp_bytes"]))
    elif x["dp"] > 1 and x["pp"] == 1 and abs(z["dp_bytes"] / y["dp_bytes"] - want) > 1e-9:
        bad("%s: grad-reduce bf16 DP bytes %.4fx (%.2fx expected)" % (n, z["dp_bytes"] / y["dp_bytes"], want))
if timed < 10: bad("only %d layouts timed" % timed)
if ok: print("ok: plan: bf16 ranks %d layouts (fp32 %d), %d timed: activations <= 0.55x, TP and PP bytes half, DP half with --grad-reduce bf16" % (len(b), len(f), timed))
sys.exit(0 if ok else 1)
EOF
fi

if want mma; then
    MA="--steps 10 --log-every 1 --precision bf16 --attention fused"
    train mma_ref 1 1 $MA --gemm portable && train mma_var 1 1 $MA --gemm mma-emulated &&
        logsays "$D/mma_ref.log" "attention path = fused (blocks" &&
        if grep -q "mma variant" "$D/mma_ref.log"; then fail "mma_ref: the log names the mma variant"; fi &&
        logsays "$D/mma_var.log" "bf16 on the mma variant, emulated" &&
        if $PY - "$D/mma_ref.jsonl" "$D/mma_var.jsonl" <<'EOF'; then :; else fail "mma variant"; fi
import json, sys
def tr(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b = tr(sys.argv[1]), tr(sys.argv[2])
worst = max((abs(b[s] - a[s]) / abs(a[s]) if s in b else float("inf")) for s in a) if a else float("inf")
if len(a) != 10 or not worst <= 5e-3 or a == b:
    print("mma variant: %d steps, worst relative difference %.3g (5e-3 allowed)%s"
          % (len(a), worst, "; bitwise equal: the variant did not run" if a == b else ""))
    for s in sorted(a): print(" ", s, a[s], b.get(s))
    sys.exit(1)
print("ok: the mma variant's 10 bf16 steps within %.2g of the scalar fused kernel's" % worst)
EOF
fi

if want refuse; then
    refused "bf16 ep, odd dim" "--precision bf16 with --ep 2 needs an even --dim (got 63)" 1 2 \
        --precision bf16 --dp 2 --ep 2 --experts 4 --top-k 2 --dim 63 --heads 3 --devices-per-rank 2
    refused "unknown bf16-round" "--bf16-round must be nearest or stochastic (got 'up')" 1 1 \
        --bf16-round up
    refused "unknown grad-reduce" "--grad-reduce must be fp32 or bf16 (got 'fp16')" 1 1 \
        --grad-reduce fp16
    refused "unknown precision" "--precision must be fp32 or bf16 (got 'fp16')" 1 1 \
        --precision fp16
fi
finish
