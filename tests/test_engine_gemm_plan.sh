#!/bin/sh
# test_engine_gemm_plan.sh TRAIN_GPT MPIEXEC [part] - the model's GEMM paths (--gemm, --tf32;
# ct_gemm_plan_make, issue 28) through train_gpt, on a tuning folder of its own (the program
# cache and CLBlast parameters are the user's, so no kernel is built again).
#
# 1. "refuse": --gemm mma on a device that is not NVIDIA sm_80+ (PoCL) exits 2 naming why
#    (NVIDIA, compute capability), before any step; the flags that do not fit the operands
#    (clblast in bf16, portable or mma in fp32 without --tf32, --tf32 in bf16 or with clblast,
#    an unknown path, --tf32 2) exit 2 naming the flag.
# 2. "auto": bf16 with --gemm auto (the default) on a fresh tuning folder measures every shape
#    and records its choice (a plan_bf16 entry with a path for each of the model's shapes,
#    rate_bf16 beside it; 14 here: the logits products are the MLP's at this size); the second
#    run reads the record ("stored") and gives bitwise the same
#    losses; --gemm portable gives bitwise the losses of auto's pick when auto picked portable
#    (on PoCL, the only bf16 path: the same kernel), which are the bf16 runs of before the plan
#    existed (the same kernel through the same calls). (fp32 by default stays on CLBlast and
#    measures nothing: scripts/same_bits; not here, where CLBlast's build would cost a minute.)
# 3. "emulated": bf16 on the mma kernel through its portable stand-ins (--gemm mma-emulated, a
#    test-only name): every shape line names it, the losses within 1e-4 relative of the
#    portable kernel's (same bf16 operands, fp32 accumulation in another order).
# 4. "tf32": fp32 with --tf32 1 on the tf32 kernel's stand-ins (--gemm mma-emulated: the
#    mma-tf32-emulated path, the operands rounded as cvt.rna.tf32 does): every shape line names
#    it, every loss within 1e-3 relative of the fp32 (CLBlast) reference run and not all equal
#    to it (the operands were rounded: tf32 keeps 10 of fp32's 23 mantissa bits, so the losses
#    move by about 1e-6 relative, far from 1e-3).
# part: "all" (default), "refuse", "auto", "emulated", "tf32".
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

REAL=${XDG_CACHE_HOME:-$HOME/.cache}/cltrain
mkdir -p "$REAL/programs" "$D/cache/cltrain/tune"
ln -s "$REAL/programs" "$D/cache/cltrain/programs"
# the user's CLBlast parameters too (other ones would make CLBlast build its programs again,
# minutes on PoCL), without any gemm record
cp "$REAL"/tune/*.txt "$D/cache/cltrain/tune/" 2>/dev/null
rm -f "$D"/cache/cltrain/tune/*.gemm.txt
export XDG_CACHE_HOME="$D/cache"
TUNE="$D/cache/cltrain/tune"

text_file 300
ARGS="--layers 2 --heads 4 --dim 64 --seq 16 --batch 4 --lr 1e-3 --text $D/text.txt \
      --sample-len 0 --eval-every 0 --log-every 1 --peak-tflops 1"

losses() { grep -o '"loss":[^,]*' "$1"; }

if want refuse; then
    refused "mma on PoCL" "compute capability 8.0" 1 1 --precision bf16 --gemm mma --steps 1
    refused "clblast in bf16" "--gemm clblast multiplies fp32 operands" 1 1 --precision bf16 \
        --gemm clblast
    refused "portable in fp32" "--gemm portable multiplies bf16 operands" 1 1 --gemm portable
    refused "mma in fp32" "--gemm mma multiplies bf16 operands" 1 1 --gemm mma
    refused "tf32 in bf16" "--tf32 1 applies to fp32" 1 1 --precision bf16 --tf32 1
    refused "tf32 on clblast" "--tf32 1 runs fp32 GEMMs on the mma path" 1 1 --tf32 1 \
        --gemm clblast
    refused "unknown path" "--gemm must be auto, clblast, portable or mma" 1 1 --gemm fastest
    refused "tf32 2" "--tf32 must be 0 or 1" 1 1 --tf32 2
fi

if want auto; then
    rm -f "$TUNE"/*.gemm.txt
    if train auto1 1 1 --precision bf16 --steps 4; then
        logsays "$D/auto1.log" "bf16 products: auto, per shape measured now"
        logsays "$D/auto1.log" "mma not here"
        rec=$(ls "$TUNE"/*.gemm.txt 2>/dev/null | head -n 1)
        if [ -z "$rec" ]; then fail "auto: no gemm record in $TUNE"; else
            s=$(grep -c " GFLOP/s" "$D/auto1.log")
            n=$(grep '^plan_bf16:' "$rec" | tr ' ' '\n' | grep -c '=1$')
            r=$(grep '^rate_bf16:' "$rec" | tr ' ' '\n' | grep -c '=[1-9]')
            [ "$s" -ge 10 ] && [ "$n" -eq "$s" ] && [ "$r" -eq "$s" ] &&
                echo "ok: the record holds the $s shapes on portable, each with its rate" ||
                { fail "auto: record $rec: $n portable paths, $r rates ($s shapes)"; cat "$rec"; }
        fi
        grep -q "att scores .*portable [0-9.]* GFLOP/s" "$D/auto1.log" &&
            echo "ok: a line per shape with its rate" || fail "auto: no per-shape line"
        train auto2 1 1 --precision bf16 --steps 4 &&
            logsays "$D/auto2.log" "per shape stored" &&
            { [ "$(losses "$D/auto1.jsonl")" = "$(losses "$D/auto2.jsonl")" ] &&
                  echo "ok: the stored plan trains bitwise as the measured one" ||
                  fail "auto: stored plan's losses differ"; }
        train port 1 1 --precision bf16 --steps 4 --gemm portable &&
            logsays "$D/port.log" "bf16 products: portable, per shape measured now" &&
            { [ "$(losses "$D/auto1.jsonl")" = "$(losses "$D/port.jsonl")" ] &&
                  [ "$(losses "$D/port.jsonl" | wc -l)" -eq 4 ] &&
                  echo "ok: --gemm portable equals auto's pick bitwise" ||
                  fail "auto: --gemm portable's losses differ from auto's"; }
    fi
fi

if want emulated; then
    train port_e 1 1 --precision bf16 --steps 3 --gemm portable &&
        train emu 1 1 --precision bf16 --steps 3 --gemm mma-emulated && {
        c=$(grep -c "GFLOP/s" "$D/emu.log"); e=$(grep -c ": mma-emulated [0-9.]* GFLOP/s" "$D/emu.log")
        [ "$c" -ge 10 ] && [ "$e" -eq "$c" ] && echo "ok: every shape on mma-emulated" ||
            fail "emulated: $e of $c shape lines name mma-emulated"
        $PY - "$D/port_e.jsonl" "$D/emu.jsonl" <<'PYEOF' || fail "emulated: losses"
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print("%s: %d steps, largest relative difference %.2e (1e-4 allowed)" % ("ok" if worst <= 1e-4 else "FAIL", len(a), worst))
sys.exit(0 if len(a) == 3 and worst <= 1e-4 else 1)
PYEOF
    }
fi
if want tf32; then
    need_ref ref32 --steps 3
    if train tf 1 1 --steps 3 --tf32 1 --gemm mma-emulated; then
        logsays "$D/tf.log" "fp32 (tf32 allowed) products: mma-tf32-emulated"
        c=$(grep -c "GFLOP/s" "$D/tf.log"); e=$(grep -c ": mma-tf32-emulated [0-9.]* GFLOP/s" "$D/tf.log")
        [ "$c" -ge 10 ] && [ "$e" -eq "$c" ] && echo "ok: every shape on mma-tf32-emulated" ||
            fail "tf32: $e of $c shape lines name mma-tf32-emulated"
        $PY - "$D/ref32.jsonl" "$D/tf.jsonl" <<'PYEOF' || fail "tf32: losses"
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
ok = len(a) == 3 and worst <= 1e-3 and a != b
print("%s: %d steps, largest relative difference to fp32 %.2e (1e-3 allowed, 0 would mean no "
      "rounding)" % ("ok" if ok else "FAIL", len(a), worst))
sys.exit(0 if ok else 1)
PYEOF
    fi
fi
finish
