#!/bin/sh
# test_engine_llama.sh TRAIN_GPT MPIEXEC [part] - a Llama model (issue 29) through train_gpt.
#
# "dp": data parallelism over the flat parameter table: a Llama model (NKV 2 of 4 heads, an MLP
#   width of 40, T = 15, untied head, 2 micro-batches, clipping on) trained 20 steps as 2 threads
#   with ZeRO-1 and ZeRO-3, as 2 MPI ranks (ZeRO-0), and on the fused attention path as 2
#   threads (ZeRO-2), each within 1e-5 relative of the single device's losses (of its own path);
#   the head in chunks of rows (--loss-chunk, its lm_head products chunk by chunk) likewise;
#   recomputation (block, attention; block on the fused path) bitwise the run without.
# "files": a checkpoint resumes the run's loss curve bitwise (its CONFIG carries the Llama
#   fields), a sharded one written by dp 2 ZeRO-3 resumes on one device within 1e-5; the model saved as x.safetensors, converted to a Hugging Face directory
#   (--save-model DIR/) and read back from it (--init DIR/), trains bitwise like x.safetensors;
#   llm.c's format is refused naming why.
# "pp": four blocks over 2 stages (1f1b and interleaved as threads, gpipe as ranks), dp 2 x pp 2
#   with ZeRO-1 mixed, zb1 (the split backward's halves: threads, and ranks with recompute
#   attention), and a tied model's embedding at both ends: within 1e-5 of one device.
# "tp": tensor parallelism (q|k|v by heads, NKV 2 over tp 2: one kv head each; gate and up by
#   rows of each, o and down by columns; the embedding and head vocabulary-parallel) as 2
#   threads, as 2 ranks (fused attention), dp 2 x tp 2 ZeRO-1 mixed (2 ranks x 2 threads), and
#   with sequence parallelism (T = 16, the RMSNorms on split rows; ranks, and threads with
#   --recompute block), each within 1e-5 relative of the single device over 20 steps.
# "tpck": a tp 2 checkpoint (sharded; gathered) resumed on one device (on dp 2) within 1e-5 of
#   the single device's run from step 11.
# "moe": SwiGLU experts (4 experts, top-2, capacity 1.0 so some choices drop, aux loss 0.05):
#   ep 2 as threads (dp 2) and as ranks, and dp 2 x tp 2 with ep 2 (2 ranks x 2 threads), each
#   within 1e-5 relative of the single device with the same experts over 20 steps.
# "every": the every-axis layout at W = 8: dp 2 x tp 2 x pp 2 with sequence parallelism,
#   ZeRO-1 and SwiGLU experts over ep 2 (1f1b), as 2 ranks x 4 threads, within 1e-5 relative of
#   the single device with the same experts over 20 steps.
# "bf16": --precision bf16 (the Llama ops' bf16 variants, bf16 activations and working weights):
#   dp 2 threads ZeRO-1, tp 2 ranks, experts over ep 2 (threads) and pp 2 zb1 (4 blocks: the
#   split backward) within 5e-3 relative of the single-device bf16 run (with the same experts,
#   blocks) over 20 steps; the dense single-device
#   bf16 run is itself within 5e-3 of the fp32 run (the same model computed).
# "refuse": Llama flags without --arch llama
#   are refused with status 2 naming the flag; a tp not dividing NKV names both.
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=${3:-all}

text_file 300
ARGS="--arch llama --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-dim 40 --seq 15 --batch 4 \
      --total-batch 120 --steps 20 --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt \
      --sample-len 0 --eval-every 0 --peak-tflops 1"

# bitwise A B WHAT: B's train losses are A's at the same steps, bit for bit.
bitwise() {
    $PY - "$1" "$2" "$3" <<'PYEOF' || fail "$3: the losses are not bitwise the same"
import json, sys
def l(p): return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b = l(sys.argv[1]), l(sys.argv[2])
bad = [s for s in b if a.get(s) != b[s]]
print("ok: %s: steps %s bitwise" % (sys.argv[3], sorted(b)) if not bad else "   differ at %s" % bad)
sys.exit(1 if bad or not b else 0)
PYEOF
}

if want dp; then
    need_ref ref --attention gemm
    train z1 1 2 --dp 2 --zero 1 --attention gemm && compare "$D/ref.jsonl" "$D/z1.jsonl" "dp 2 threads ZeRO-1"
    train z3 1 2 --dp 2 --zero 3 --attention gemm && compare "$D/ref.jsonl" "$D/z3.jsonl" "dp 2 threads ZeRO-3"
    train r2 2 1 --dp 2 --attention gemm && compare "$D/ref.jsonl" "$D/r2.jsonl" "dp 2 ranks ZeRO-0"
    train lc 1 1 --attention gemm --loss-chunk 20 && compare "$D/ref.jsonl" "$D/lc.jsonl" "the head in chunks of 20 rows"
    train rcb 1 1 --attention gemm --recompute block && bitwise "$D/ref.jsonl" "$D/rcb.jsonl" "--recompute block"
    train rca 1 1 --attention gemm --recompute attention && bitwise "$D/ref.jsonl" "$D/rca.jsonl" "--recompute attention"
    need_ref reff --attention fused
    train rcf 1 1 --attention fused --recompute block && bitwise "$D/reff.jsonl" "$D/rcf.jsonl" "fused: --recompute block"
    train f2 1 2 --dp 2 --zero 2 --attention fused && compare "$D/reff.jsonl" "$D/f2.jsonl" "fused: dp 2 threads ZeRO-2"
fi

if want pp; then
    # four blocks, two micro-batches per step
    ARGS="$ARGS --layers 4 --total-batch 240"
    need_ref ref4 --attention gemm
    train p1 1 2 --pp 2 --schedule 1f1b --attention gemm && compare "$D/ref4.jsonl" "$D/p1.jsonl" "pp 2 1f1b threads"
    train pg 2 1 --pp 2 --schedule gpipe --attention gemm && compare "$D/ref4.jsonl" "$D/pg.jsonl" "pp 2 gpipe ranks"
    train pi 1 2 --pp 2 --schedule interleaved --virtual-stages 2 --attention gemm &&
        compare "$D/ref4.jsonl" "$D/pi.jsonl" "pp 2 interleaved (2 chunks per stage) threads"
    train pz 2 2 --dp 2 --pp 2 --schedule 1f1b --zero 1 --attention gemm &&
        compare "$D/ref4.jsonl" "$D/pz.jsonl" "dp 2 x pp 2 ZeRO-1, 2 ranks x 2 threads"
    train pzb 1 2 --pp 2 --schedule zb1 --attention gemm && compare "$D/ref4.jsonl" "$D/pzb.jsonl" "pp 2 zb1 threads (the split backward)" &&
        bitwise "$D/p1.jsonl" "$D/pzb.jsonl" "zb1's halves against 1f1b's whole backward"
    train pzr 2 1 --pp 2 --schedule zb1 --attention gemm --recompute attention &&
        compare "$D/ref4.jsonl" "$D/pzr.jsonl" "pp 2 zb1 ranks, --recompute attention"
    need_ref ref4t --attention gemm --tie-embeddings 1
    train pt 1 2 --pp 2 --schedule 1f1b --attention gemm --tie-embeddings 1 &&
        compare "$D/ref4t.jsonl" "$D/pt.jsonl" "tied: pp 2 1f1b threads (the embedding's two ends)"
fi

if want tp; then
    need_ref ref --attention gemm
    train t2 1 2 --tp 2 --attention gemm && compare "$D/ref.jsonl" "$D/t2.jsonl" "tp 2 threads"
    train dt 2 2 --dp 2 --tp 2 --zero 1 --attention gemm &&
        compare "$D/ref.jsonl" "$D/dt.jsonl" "dp 2 x tp 2 ZeRO-1, 2 ranks x 2 threads"
    need_ref reff --attention fused
    train t2f 2 1 --tp 2 --attention fused && compare "$D/reff.jsonl" "$D/t2f.jsonl" "fused: tp 2 ranks"
    need_ref ref16 --attention gemm --seq 16 --total-batch 128
    train sp 2 1 --tp 2 --sequence-parallel 1 --attention gemm --seq 16 --total-batch 128 &&
        compare "$D/ref16.jsonl" "$D/sp.jsonl" "tp 2 sequence parallel ranks"
    train spr 1 2 --tp 2 --sequence-parallel 1 --attention gemm --seq 16 --total-batch 128 --recompute block &&
        compare "$D/ref16.jsonl" "$D/spr.jsonl" "tp 2 sequence parallel threads, --recompute block"
fi

if want tpck; then
    # checkpoints of tp 2 (q|k|v and gate|up sliced by sections) resumed on one device:
    # sharded (each worker its runs) and gathered
    need_ref ref --attention gemm
    train tck 1 2 --tp 2 --attention gemm --save "$D/tck" --save-every 10 --save-format sharded
    train tckr 1 1 --attention gemm --resume "$D/tck/ckpt_00000010.bin" &&
        compare "$D/ref.jsonl" "$D/tckr.jsonl" "tp 2 sharded checkpoint resumed on 1 device" 11
    train tcg 2 1 --tp 2 --attention gemm --save "$D/tcg" --save-every 10 --save-format gathered
    train tcgr 1 2 --dp 2 --attention gemm --resume "$D/tcg/ckpt_00000010.bin" &&
        compare "$D/ref.jsonl" "$D/tcgr.jsonl" "tp 2 gathered checkpoint resumed on dp 2" 11
fi

if want moe; then
    MOE="--experts 4 --top-k 2 --capacity-factor 1.0 --aux-loss 0.05 --attention gemm"
    need_ref refm $MOE
    train e2 1 2 --dp 2 --ep 2 $MOE && compare "$D/refm.jsonl" "$D/e2.jsonl" "experts: ep 2 threads"
    train e2r 2 1 --dp 2 --ep 2 --zero 1 $MOE && compare "$D/refm.jsonl" "$D/e2r.jsonl" "experts: ep 2 ranks ZeRO-1"
    train e2t 2 2 --dp 2 --ep 2 --tp 2 $MOE &&
        compare "$D/refm.jsonl" "$D/e2t.jsonl" "experts: dp 2 (ep 2) x tp 2, 2 ranks x 2 threads"
fi

if want every; then
    MOE="--experts 4 --top-k 2 --capacity-factor 1.0 --aux-loss 0.05 --attention gemm"
    need_ref refe $MOE --seq 16 --total-batch 128
    train every 2 4 --dp 2 --tp 2 --pp 2 --schedule 1f1b --sequence-parallel 1 --zero 1 --ep 2 \
        $MOE --seq 16 --total-batch 128 &&
        compare "$D/refe.jsonl" "$D/every.jsonl" "dp 2 x tp 2 x pp 2, SP, ZeRO-1, ep 2: 2 ranks x 4 threads"
fi

# near A B WHAT: every step's loss of A in B within 5e-3 relative (bf16's tolerance).
near() {
    $PY - "$1" "$2" "$3" <<'PYEOF' || fail "$3"
import json, sys
def tr(p): return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b, what = tr(sys.argv[1]), tr(sys.argv[2]), sys.argv[3]
worst = max((abs(b[s] - a[s]) / abs(a[s]) if s in b else float("inf")) for s in a) if a else float("inf")
ok = len(a) == 20 and worst <= 5e-3
print("%s %-44s 20 steps, worst relative difference %.2e (5e-3 allowed)" % ("ok:" if ok else "  ", what, worst))
sys.exit(0 if ok else 1)
PYEOF
}

if want bf16; then
    need_ref ref --attention gemm
    need_ref refb --attention gemm --precision bf16
    near "$D/ref.jsonl" "$D/refb.jsonl" "bf16 single device against fp32"
    train b2 1 2 --dp 2 --zero 1 --attention gemm --precision bf16 &&
        near "$D/refb.jsonl" "$D/b2.jsonl" "bf16: dp 2 threads ZeRO-1"
    train bt 2 1 --tp 2 --attention gemm --precision bf16 &&
        near "$D/refb.jsonl" "$D/bt.jsonl" "bf16: tp 2 ranks"
    BMOE="--experts 4 --top-k 2 --attention gemm --precision bf16"
    need_ref refbm $BMOE
    train bm 1 2 --dp 2 --ep 2 $BMOE && near "$D/refbm.jsonl" "$D/bm.jsonl" "bf16: SwiGLU experts, ep 2 threads"
    # four blocks: the split backward's kept gradients copied as bf16 (zb1)
    need_ref refb4 --attention gemm --precision bf16 --layers 4 --total-batch 240
    train bz 1 2 --pp 2 --schedule zb1 --attention gemm --precision bf16 --layers 4 \
        --total-batch 240 && near "$D/refb4.jsonl" "$D/bz.jsonl" "bf16: pp 2 zb1 threads"
fi

if want files; then
    need_ref ref --attention gemm
    train half 1 1 --attention gemm --steps 20 --save "$D/ck" --save-every 10 \
        --save-model "$D/m.safetensors"
    train resumed 1 1 --attention gemm --resume "$D/ck/ckpt_00000010.bin" &&
        compare "$D/ref.jsonl" "$D/resumed.jsonl" "resumed at step 10" 11
    bitwise "$D/ref.jsonl" "$D/resumed.jsonl" "resumed at step 10"
    # a sharded ZeRO-3 checkpoint of 2 workers resumed on one device
    train sh 1 2 --attention gemm --dp 2 --zero 3 --save "$D/cks" --save-every 10 \
        --save-format sharded
    train shr 1 1 --attention gemm --resume "$D/cks/ckpt_00000010.bin" &&
        compare "$D/ref.jsonl" "$D/shr.jsonl" "dp 2 ZeRO-3 sharded checkpoint resumed on 1 device" 11
    # the saved model read back; written again as a Hugging Face directory, read back from it
    train from1 1 1 --attention gemm --steps 5 --init "$D/m.safetensors"
    train conv 1 1 --attention gemm --steps 0 --init "$D/m.safetensors" --save-model "$D/hf/"
    train from2 1 1 --attention gemm --steps 5 --init "$D/hf/"
    bitwise "$D/from1.jsonl" "$D/from2.jsonl" "--init of the Hugging Face directory it was saved as"
    logsays "$D/from2.log" "llama L=2 NH=4 NKV=2 C=32 F=40"
    [ -f "$D/hf/config.json" ] && grep -q '"LlamaForCausalLM"' "$D/hf/config.json" &&
        echo "ok: hf/config.json names LlamaForCausalLM" || fail "hf/config.json"
    refused "llm.c's format" "llm.c's model format is GPT-2's" 1 1 --save-model "$D/m.bin"
fi

if want refuse; then
    refused "--tp 4 over NKV 2" "tp = 4 does not divide the 2 key/value heads" 1 4 --tp 4 --devices-per-rank 4
    refused "--kv-heads 3" "--kv-heads 3 does not divide --heads 4" 1 1 --kv-heads 3
    rm -f "$D/bad.jsonl"
    expect_refusal --no-output "$D/bad.jsonl" "--kv-heads with gpt2" \
        "--kv-heads is a Llama model's; give --arch llama" launch 1 1 "$TRAIN" --layers 2 \
        --heads 4 --dim 32 --kv-heads 2 --text "$D/text.txt" --metrics "$D/bad.jsonl"
fi
finish
