#!/bin/sh
# test_engine_pieces.sh TRAIN_GPT PIECES_TEST MPIEXEC [part] - the element-wise launches cut into
# pieces (ct_launch_piece_max, cl/buffer.c) give bitwise the results of one launch.
#
# 1. "ops": test_engine_pieces (its ops against host references) with CT_TEST_MAX_LAUNCH=4096
#    (every launch in six pieces) and without (one piece): both pass and write the same bytes.
# 2. "train": train_gpt (2 layers, C 32, 6 steps, clipping on) with CT_TEST_MAX_LAUNCH=64 and
#    without: the same losses and gradient norms, bitwise (the "train" records compared as
#    text), in fp32 and in bf16 (the working copy's conversions in pieces too).
# part: "all" (default), "ops", "train".
. "$(dirname "$0")/lib.sh"
TRAIN=$1 PIECES=$2 MPIEXEC=$3 PART=${4:-all}

if want ops; then
    if POCL_DEVICES=pthread CT_TEST_MAX_LAUNCH=4096 "$PIECES" "$D/p.bin" 4096 >"$D/p.log" 2>&1 &&
        POCL_DEVICES=pthread "$PIECES" "$D/one.bin" 1073741824 >"$D/one.log" 2>&1; then
        if cmp -s "$D/p.bin" "$D/one.bin"; then
            echo "ok: ops in pieces of 4096 bitwise one launch's ($(wc -c <"$D/p.bin") bytes)"
        else
            fail "ops: pieces of 4096 differ from one launch"
        fi
    else
        fail "ops: test_engine_pieces failed"; cat "$D/p.log" "$D/one.log"
    fi
fi

if want train; then
    text_file 200
    ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 4 --steps 6 --text $D/text.txt --seed 3 --grad-clip 0.3"
    for prec in fp32 bf16; do
        train one_$prec 1 1 --precision $prec &&
            CT_TEST_MAX_LAUNCH=64 train pcs_$prec 1 1 --precision $prec || continue
        if $PY - "$D/one_$prec.jsonl" "$D/pcs_$prec.jsonl" "$prec" <<'PYEOF'; then :; else fail "train $prec: pieces of 64 differ"; fi
import json, sys
def recs(p):
    return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))
            if r.get("type") == "train"]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
ok = len(a) == 6 and a == b
print("%s train %s: %d steps, losses and norms %s (loss %r -> %r)" % (
    "ok:" if ok else "  ", sys.argv[3], len(a), "bitwise equal" if ok else "DIFFER", a[0][1], a[-1][1]))
sys.exit(0 if ok else 1)
PYEOF
    done
fi
finish
