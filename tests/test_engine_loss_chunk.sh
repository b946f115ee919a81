# test_engine_loss_chunk.sh TRAIN_GPT MPIEXEC [part] - the head and its loss in chunks of rows
# (--loss-chunk, issue 30 item 4) against the head in one piece:
#   same    one device (gemm and fused attention) and tp 2 as threads (the vocabulary-parallel
#           head: each chunk's statistics all-reduced over the TP group), 6 steps: losses and
#           gradient norms within 1e-6 relative, the memory record's activations smaller by the
#           logits rows the chunk leaves out, predicted == allocated
#   sp      tp 2 with sequence parallelism (each chunk: 20 of each worker's rows gathered, the
#           input gradient reduce-scattered back), threads and ranks, 10 steps: within 1e-6
#           relative of the same layout unchunked, the activations smaller by the logits rows
#           the chunk leaves out, predicted == allocated
#   refuse  a chunk below the sequence, a negative one: status 2, the flag named, nothing
#           trained
#   big     (slow) GPT-2's vocabulary (50257) and 48 x 1024 = 49152 tokens in one micro-batch on
#           one worker: whole logits would be 2.47e9 floats (above 2^31 elements: refused,
#           named), in chunks of 4096 rows one step trains with a finite loss near ln(50257)
. "$(dirname "$0")/lib.sh"
TRAIN=$1 MPIEXEC=$2 PART=${3:-all}
text_file 300
ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 8 --text $D/text.txt --steps 6 --warmup 2
      --eval-every 0 --sample-len 4 --log-every 1 --grad-clip 0.3"

# close A B WHAT: every step's loss and norm of A within 1e-6 relative of B's
close() {
    $PY - "$1" "$2" "$3" <<'PYEOF' || fail "$3"
import json, sys
def steps(p):
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))
            if r.get("type") == "train"}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
if not a or sorted(a) != sorted(b): print("   steps differ:", sorted(a), sorted(b)); sys.exit(1)
wl = max(abs(a[s][0] - b[s][0]) / abs(a[s][0]) for s in a)
wn = max(abs(a[s][1] - b[s][1]) / abs(a[s][1]) for s in a)
ok = wl <= 1e-6 and wn <= 1e-6
print("%s %-40s %d steps, worst relative difference: loss %.2e, norm %.2e"
      % ("ok:" if ok else "  ", sys.argv[3], len(a), wl, wn))
sys.exit(0 if ok else 1)
PYEOF
}

# smaller A B ROWS VP WHAT: worker 0's predicted and allocated activations in B are A's less the
# (B*T - ROWS) x VP logits floats the chunk leaves out (per slot), and equal their allocation
smaller() {
    $PY - "$1" "$2" "$3" "$4" "$5" <<'PYEOF' || fail "$5"
import json, sys
def mem(p):
    return [r for r in map(json.loads, open(p)) if r.get("type") == "memory" and r["worker"] == 0][0]
a, b, rows, vp = mem(sys.argv[1]), mem(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pa, pb = a["predicted"], b["predicted"]
left = (pa["act_slot"] - pb["act_slot"]) // 4
want = (8 * 16 - rows) * vp
ok = b["activations"] == pb["act_slot"] * pb["slots"] + pb["act_scratch"] and left >= want and \
     left < want + 64 and b["activations"] < a["activations"]
print("%s %-40s activations %d -> %d bytes (a slot %d floats smaller, the logits' %d)"
      % ("ok:" if ok else "  ", sys.argv[5], a["activations"], b["activations"], left, want))
sys.exit(0 if ok else 1)
PYEOF
}

if want same; then
    for attn in gemm fused; do
        train whole_$attn 1 1 --attention $attn &&
            train chunk_$attn 1 1 --attention $attn --loss-chunk 24 &&
            close "$D/whole_$attn.jsonl" "$D/chunk_$attn.jsonl" "one device, $attn, chunks of 24"
    done
    smaller "$D/whole_gemm.jsonl" "$D/chunk_gemm.jsonl" 24 256 "one device: the logits' memory"
    train whole_tp 1 2 --tp 2 && train chunk_tp 1 2 --tp 2 --loss-chunk 40 &&
        close "$D/whole_tp.jsonl" "$D/chunk_tp.jsonl" "tp 2 threads, chunks of 40"
    smaller "$D/whole_tp.jsonl" "$D/chunk_tp.jsonl" 40 128 "tp 2: the logits' memory"
fi

if want sp; then
    SP="--tp 2 --sequence-parallel 1 --steps 10"
    train whole_sp 1 2 $SP && train chunk_sp 1 2 $SP --loss-chunk 40 &&
        close "$D/whole_sp.jsonl" "$D/chunk_sp.jsonl" "tp 2 sp threads, chunks of 40"
    smaller "$D/whole_sp.jsonl" "$D/chunk_sp.jsonl" 40 128 "tp 2 sp: the logits' memory"
    train chunk_sp_ranks 2 1 $SP --loss-chunk 40 &&
        close "$D/whole_sp.jsonl" "$D/chunk_sp_ranks.jsonl" "tp 2 sp ranks, chunks of 40"
    # a chunk that is no multiple of the workers: 37 -> 18 of each worker's rows
    train chunk_sp_odd 1 2 $SP --loss-chunk 37 &&
        close "$D/whole_sp.jsonl" "$D/chunk_sp_odd.jsonl" "tp 2 sp threads, chunks of 37 (36)"
    smaller "$D/whole_sp.jsonl" "$D/chunk_sp_odd.jsonl" 36 128 "tp 2 sp, chunks of 36: memory"
fi

if want refuse; then
    refused "a chunk below the sequence" "--loss-chunk 8: 0 (no chunks) or at least --seq 16" 1 1 \
        --loss-chunk 8
    refused "a negative chunk" "--loss-chunk -4" 1 1 --loss-chunk -4
fi

if want big; then
    awk 'BEGIN { for (i = 0; i < 20000; i++) printf "the model trains on tokens of text. " }' \
        >"$D/big.txt"
    BIG="--layers 1 --heads 2 --dim 32 --seq 1024 --batch 48 --vocab 50257 --text $D/big.txt
         --steps 1 --eval-every 0 --sample-len 2 --attention fused"
    expect_refusal "whole logits of 49152 x 50304" "too large" \
        "$TRAIN" $BIG --metrics "$D/bigw.jsonl"
    if logged "$D/big.log" "$D/big.log" "$TRAIN" $BIG --loss-chunk 4096 --metrics "$D/big.jsonl"; then
        $PY - "$D/big.jsonl" <<'PYEOF' || fail "49152 tokens in chunks of 4096"
import json, math, sys
rs = list(map(json.loads, open(sys.argv[1])))
t = [r for r in rs if r.get("type") == "train"]
m = [r for r in rs if r.get("type") == "memory" and r["worker"] == 0][0]
loss = t[0]["loss"] if t else float("nan")
head = 4096 * 50304 * 4  # the logits of one chunk
ok = len(t) == 1 and math.isfinite(loss) and abs(loss - math.log(50257)) < 0.5 and \
     m["predicted"]["act_slot"] < head + 48 * 1024 * 32 * 4 * 40
print("%s 49152 tokens x V 50257 in chunks of 4096: loss %.4f (ln V %.4f), a slot %.0f MiB "
      "(one chunk's logits %.0f MiB)" % ("ok:" if ok else "  ", loss, math.log(50257),
      m["predicted"]["act_slot"] / 2**20, head / 2**20))
sys.exit(0 if ok else 1)
PYEOF
    else
        fail "49152 tokens in chunks of 4096: exit status $?"; tail -5 "$D/big.log"
    fi
fi
finish
