#!/bin/sh
# test_train_cli.sh TRAIN_GPT SAMPLE_GPT - train_gpt and sample_gpt as a user runs them.
#
# 1. Every bad input of issue 3 (bad flag or value, impossible shape, tokens outside the
#    vocabulary, missing / truncated / malformed files, a device too small) exits with status 2
#    and a message naming the problem, and leaves no output file (final or temporary) behind.
# 2. Bit-identical resume: the losses after resuming from a checkpoint equal, bit for bit (as
#    float32 printed with 9 significant digits), those of the uninterrupted run: (a) 2N steps
#    with a checkpoint at N, resumed from it; (b) N steps, save, resume to 2N, against 2N in one
#    run; with gradient accumulation and shuffling on.
# 3. The llm.c model file written by --save-model is read back by --init and by sample_gpt.
. "$(dirname "$0")/lib.sh"
TRAIN=$1
SAMPLE=$2
checks=0

# Small, fast settings shared by every run.
TINY="--layers 1 --heads 2 --dim 16 --seq 8 --batch 2 --sample-len 0 --eval-every 0 --peak-tflops 1"

# expect_bad "what" "message part" args... : status 2, message on stderr, no output files.
expect_bad() {
    what=$1; msg=$2; shift 2
    checks=$((checks + 1))
    rm -rf "$D/out"; mkdir -p "$D/out"
    "$TRAIN" --save-model "$D/out/model.bin" --metrics "$D/out/m.jsonl" "$@" \
        >"$D/stdout" 2>"$D/stderr"
    rc=$?
    if [ $rc -ne 2 ]; then fail "$what: exit status $rc, expected 2"; cat "$D/stderr"; return; fi
    if ! grep -qF -- "$msg" "$D/stderr"; then
        fail "$what: message lacks '$msg':"; cat "$D/stderr"; return
    fi
    left=$(ls -A "$D/out")
    if [ -n "$left" ]; then fail "$what: left files behind: $left"; return; fi
    echo "ok: $what -> $(head -c 160 "$D/stderr" | head -n 1)"
}

# Fixtures: text, shards (good, truncated, bad magic, out-of-vocabulary), a model file.
$PY - "$D" <<'EOF' || { echo "FAIL: cannot make fixtures"; exit 1; }
import struct, sys
d = sys.argv[1]
def shard(path, toks, magic=20240520, version=1, count=None, cut=0):
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, len(toks) if count is None else count
    fmt = "<%dH" % len(toks) if magic == 20240520 else "<%dI" % len(toks)
    b = struct.pack("<256i", *h) + struct.pack(fmt, *toks)
    open(path, "wb").write(b[:len(b) - cut] if cut else b)
toks = [(i * 7 + 3) % 200 for i in range(5000)]
shard(d + "/good_000.bin", toks)
shard(d + "/good_001.bin", toks[::-1], magic=20240801, version=7)
shard(d + "/trunc.bin", toks, cut=6)
shard(d + "/magic.bin", toks, magic=1234)
shard(d + "/count.bin", toks, count=4000)
shard(d + "/oov.bin", toks[:100] + [60000] + toks[100:])
open(d + "/text.txt", "w").write("the quick brown fox jumps over the lazy dog. " * 200)
EOF

# A model file with maxT = 8 for the --init cases.
if ! "$TRAIN" $TINY --text "$D/text.txt" --steps 0 --save-model "$D/m8.bin" >/dev/null 2>"$D/err"; then
    fail "could not write a model file:"; cat "$D/err"
fi
head -c 1500 "$D/m8.bin" >"$D/m8_trunc.bin"
# Bad magic: overwrite the first int.
cp "$D/m8.bin" "$D/m8_magic.bin"
printf 'XXXX' | dd of="$D/m8_magic.bin" bs=1 seek=0 conv=notrunc 2>/dev/null

T="--text $D/text.txt"
expect_bad "unknown flag" "unknown flag '--bogus'" $TINY $T --bogus 1
expect_bad "bad integer" "--layers: 'x' is not an integer" $TINY $T --layers x
expect_bad "bad number" "--lr: 'fast' is not a number" $TINY $T --lr fast
expect_bad "missing value" "--steps needs a value" $TINY $T --steps
expect_bad "stray argument" "unexpected argument" $TINY $T stray
expect_bad "bad schedule" "--lr-schedule: 'exp'" $TINY $T --lr-schedule exp
expect_bad "negative steps" "--steps must be >= 0" $TINY $T --steps -1
expect_bad "bad shuffle" "--shuffle must be 0 or 1" $TINY $T --shuffle 2
expect_bad "total batch" "is not a multiple of --batch x --seq" $TINY $T --total-batch 20
expect_bad "heads vs dim" "--heads 3 does not divide --dim 16" $TINY $T --heads 3
expect_bad "seq above maxT" "--seq 16 is above the model's maximum sequence length maxT = 8" \
    $TINY $T --init "$D/m8.bin" --seq 16
expect_bad "shape vs model file" "--dim 32 contradicts the model of $D/m8.bin (16)" \
    $TINY $T --init "$D/m8.bin" --dim 32
expect_bad "data and text" "--data and --text are exclusive" $TINY $T --data "$D/good_*.bin"
expect_bad "missing text" "cannot open $D/none.txt" $TINY --text "$D/none.txt"
expect_bad "no shard matches" "no file matches the data pattern" $TINY --data "$D/none_*.bin"
expect_bad "truncated shard" "truncated" $TINY --data "$D/trunc.bin"
expect_bad "shard bad magic" "bad magic 1234" $TINY --data "$D/magic.bin"
expect_bad "shard count" "the header says 4000 tokens" $TINY --data "$D/count.bin"
expect_bad "token outside vocab" "token 60000 at position 100 of $D/oov.bin is outside the vocabulary of 50257" \
    $TINY --data "$D/oov.bin"
expect_bad "text vs small vocab" "outside the vocabulary of 100" $TINY $T --vocab 100
expect_bad "too little data" "fewer than one step needs" $TINY $T --batch 4000
expect_bad "missing model" "cannot open model file $D/none.bin" $TINY $T --init "$D/none.bin"
expect_bad "truncated model" "truncated" $TINY $T --init "$D/m8_trunc.bin"
expect_bad "model bad magic" "bad magic" $TINY $T --init "$D/m8_magic.bin"
expect_bad "missing checkpoint" "cannot resume from $D/none" $TINY $T --resume "$D/none"
expect_bad "init and resume" "--init and --resume are exclusive" $TINY $T --init "$D/m8.bin" --resume "$D"
expect_bad "no device" "no-such-device-name" $TINY $T --device no-such-device-name
expect_bad "device too small" "cannot build the model" --layers 8 --dim 512 --heads 8 --seq 64 \
    --batch 8 $T --mem-cap-gb 0.01 --sample-len 0
expect_bad "output dir missing" "does not exist" $TINY $T --save-model "$D/nodir/x.bin"
expect_bad "bad attention path" "--attention must be gemm, fused or auto (got 'flash')" $TINY $T \
    --attention flash

# ---- resume, bit for bit.
losses() { grep '"type":"train"' "$1" | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 2 --total-batch 64 --shuffle 1 \
     --text $D/text.txt --sample-len 0 --eval-every 0 --peak-tflops 1 --lr 3e-3 --warmup 2"
RUN="$TRAIN $ARGS"
# (a) 2N = 8 steps with a checkpoint every 4; resume from step 4.
checks=$((checks + 1))
if $RUN --steps 8 --save "$D/ck_a" --save-every 4 --metrics "$D/a.jsonl" >"$D/log_a" 2>&1 &&
   $RUN --steps 8 --resume "$D/ck_a/ckpt_00000004.bin" --metrics "$D/b.jsonl" >"$D/log_b" 2>&1; then
    losses "$D/a.jsonl" | tail -n 4 >"$D/la"
    losses "$D/b.jsonl" >"$D/lb"
    if [ "$(wc -l <"$D/lb")" -ne 4 ] || ! cmp -s "$D/la" "$D/lb"; then
        fail "resume (a): losses differ"; paste "$D/la" "$D/lb"
    else
        echo "ok: resume (a): steps 4..7 identical: $(tr '\n' ' ' <"$D/lb")"
    fi
else
    fail "resume (a): a run failed"; tail -n 3 "$D/log_a" "$D/log_b"
fi
# (b) N = 4 steps, save, resume to 8, against 8 in one run (constant schedule: the schedule
# must not depend on --steps for the two to be the same training).
checks=$((checks + 1))
C="--lr-schedule constant"
if $RUN $C --steps 8 --metrics "$D/c.jsonl" >"$D/log_c" 2>&1 &&
   $RUN $C --steps 4 --save "$D/ck_b" --metrics "$D/d.jsonl" >"$D/log_d" 2>&1 &&
   $RUN $C --steps 8 --resume "$D/ck_b" --metrics "$D/d.jsonl" >"$D/log_e" 2>&1; then
    losses "$D/c.jsonl" >"$D/lc"
    losses "$D/d.jsonl" >"$D/ld"
    if [ "$(wc -l <"$D/ld")" -ne 8 ] || ! cmp -s "$D/lc" "$D/ld"; then
        fail "resume (b): losses differ"; paste "$D/lc" "$D/ld"
    else
        echo "ok: resume (b): 4 + save + resume + 4 == 8: $(tr '\n' ' ' <"$D/ld")"
    fi
    # A corrupted and a truncated checkpoint are refused.
    f=$(ls "$D"/ck_b/ckpt_*.bin | head -n 1)
    cp "$f" "$D/corrupt.bin"
    printf 'Z' | dd of="$D/corrupt.bin" bs=1 seek=3000 conv=notrunc 2>/dev/null
    head -c 3000 "$f" >"$D/trunc.ckpt"
    expect_bad "corrupt checkpoint" "fails its CRC-32 check" $ARGS --steps 8 --resume "$D/corrupt.bin"
    expect_bad "truncated checkpoint" "truncated checkpoint" $ARGS --steps 8 --resume "$D/trunc.ckpt"
else
    fail "resume (b): a run failed"; tail -n 3 "$D/log_c" "$D/log_d" "$D/log_e"
fi
# Checkpoints are complete files; no temporary file is left.
checks=$((checks + 1))
if ls -A "$D"/ck_a "$D"/ck_b | grep -q '\.tmp\.'; then fail "temporary files left in checkpoint dirs"; fi

# ---- --save-model, --init and sample_gpt on the same file.
checks=$((checks + 1))
if $RUN --steps 3 --save-model "$D/final.bin" >"$D/log_f" 2>&1 &&
   "$TRAIN" --init "$D/final.bin" --text "$D/text.txt" --seq 16 --batch 2 --steps 0 \
       --sample-len 0 --eval-every 0 --save-model "$D/final2.bin" >"$D/log_g" 2>&1 &&
   cmp -s "$D/final.bin" "$D/final2.bin"; then
    echo "ok: --save-model -> --init -> --save-model is byte-identical"
else
    fail "--save-model/--init round trip"; tail -n 3 "$D/log_f" "$D/log_g"
fi
checks=$((checks + 1))
if "$SAMPLE" --model "$D/final.bin" --len 20 --prompt "the " >"$D/sample" 2>"$D/err" &&
   [ "$(head -c 4 "$D/sample")" = "the " ] && [ "$(wc -c <"$D/sample")" -ge 24 ]; then
    echo "ok: sample_gpt printed: $(head -c 40 "$D/sample" | tr '\n' ' ')"
else
    fail "sample_gpt on a saved model"; cat "$D/err"
fi
checks=$((checks + 1))
"$SAMPLE" --model "$D/m8_trunc.bin" >/dev/null 2>"$D/err"
if [ $? -ne 2 ] || ! grep -q truncated "$D/err"; then fail "sample_gpt on a truncated model"; fi


# ---- llm.c shards with the GPT-2 vocabulary, validation shards, the metrics file's keys.
checks=$((checks + 1))
if "$TRAIN" --layers 1 --heads 2 --dim 16 --seq 16 --batch 2 --data "$D/good_*.bin" \
       --val-data "$D/good_001.bin" --steps 3 --eval-every 2 --eval-batches 2 --sample-len 4 \
       --metrics "$D/s.jsonl" --save-model "$D/gpt2v.bin" >"$D/log_s" 2>&1; then
    n=$(grep -c '"type":"train"' "$D/s.jsonl")
    ne=$(grep -c '"type":"eval","step":[0-9]*,"val_loss":[0-9.]' "$D/s.jsonl")
    nk=$(grep '"type":"train"' "$D/s.jsonl" | grep '"step":' | grep '"loss":' | grep '"lr":' |
         grep '"grad_norm":' | grep '"ms":' | grep '"tokens_per_s":' | grep '"tflops":' |
         grep '"mfu":' | grep -c '"mem_bytes":')
    if [ "$n" -ne 3 ] || [ "$nk" -ne 3 ] || [ "$ne" -ne 2 ] ||
       ! grep -q "V=50257 Vp=50304" "$D/log_s"; then
        fail "shards run: $n train records ($nk with every key), $ne eval records"; cat "$D/log_s"
    else
        echo "ok: GPT-2-vocabulary run on two shards: 3 train records with every key, 2 evals"
    fi
else
    fail "shards run failed"; tail -n 5 "$D/log_s"
fi

# ---- gradient accumulation: 2 micro-batches of 2 rows give the losses of 1 batch of 4 rows
# (same tokens; fp32 sums in another order, so to 1e-5 relative, not bitwise).
checks=$((checks + 1))
G="--layers 2 --heads 2 --dim 32 --seq 16 --total-batch 64 --text $D/text.txt --sample-len 0 \
   --eval-every 0 --peak-tflops 1 --steps 5 --warmup 1"
if "$TRAIN" $G --batch 4 --metrics "$D/g1.jsonl" >"$D/log_g1" 2>&1 &&
   "$TRAIN" $G --batch 2 --metrics "$D/g2.jsonl" >"$D/log_g2" 2>&1; then
    losses "$D/g1.jsonl" >"$D/lg1"
    losses "$D/g2.jsonl" >"$D/lg2"
    if paste "$D/lg1" "$D/lg2" | awk '{ d = $2 - $4; if (d < 0) d = -d;
           if (NF != 4 || d > 1e-5 * $2) bad = 1; n++ } END { exit (bad || n != 5) }'; then
        echo "ok: accumulation 2x2 == 1x4 rows: $(paste "$D/lg1" "$D/lg2" | awk '{printf "%s/%s ", $2, $4}')"
    else
        fail "accumulation changes the losses"; paste "$D/lg1" "$D/lg2"
    fi
else
    fail "accumulation runs failed"; tail -n 3 "$D/log_g1" "$D/log_g2"
fi

# ---- --attention fused: two runs give bitwise the same losses, within 1e-5 of the GEMM path's;
# the start-up report names the path and the per-layer activation bytes; auto logs its choice.
checks=$((checks + 1))
A="--layers 2 --heads 2 --dim 32 --seq 32 --batch 2 --text $D/text.txt --sample-len 0 \
   --eval-every 0 --peak-tflops 1 --steps 4 --warmup 1"
if "$TRAIN" $A --attention fused --metrics "$D/f1.jsonl" >"$D/log_f1" 2>&1 &&
   "$TRAIN" $A --attention fused --metrics "$D/f2.jsonl" >"$D/log_f2" 2>&1 &&
   "$TRAIN" $A --attention gemm --metrics "$D/f3.jsonl" >"$D/log_f3" 2>&1 &&
   "$TRAIN" $A --attention auto --steps 1 >"$D/log_f4" 2>&1; then
    losses "$D/f1.jsonl" >"$D/lf1"
    losses "$D/f2.jsonl" >"$D/lf2"
    losses "$D/f3.jsonl" >"$D/lf3"
    if [ "$(wc -l <"$D/lf1")" -ne 4 ] || ! cmp -s "$D/lf1" "$D/lf2"; then
        fail "--attention fused: two runs differ"; paste "$D/lf1" "$D/lf2"
    elif ! paste "$D/lf1" "$D/lf3" | awk '{ d = $2 - $4; if (d < 0) d = -d;
           if (NF != 4 || d > 1e-5 * $4) bad = 1; n++ } END { exit (bad || n != 4) }'; then
        fail "--attention fused vs gemm losses"; paste "$D/lf1" "$D/lf3"
    elif ! grep -q "attention path = fused (blocks" "$D/log_f1" ||
         ! grep -q "activations    = .* MiB of it per layer" "$D/log_f1" ||
         ! grep -q "attention path = gemm" "$D/log_f3" ||
         ! grep -q "attention path = auto -> \(fused\|gemm\): .* fused .* ms, gemm .* ms" "$D/log_f4"; then
        fail "--attention start-up report"; grep -E "attention path|activations" "$D"/log_f*
    else
        echo "ok: --attention fused twice bitwise, vs gemm: $(paste "$D/lf1" "$D/lf3" | awk '{printf "%s/%s ", $2, $4}')"
        grep -h "attention path = auto" "$D/log_f4"
    fi
else
    fail "--attention runs failed"; tail -n 3 "$D"/log_f*
fi

# ---- sample_gpt through an llm.c tokenizer file (GPT-2 vocabulary model from above).
checks=$((checks + 1))
$PY - "$D/tok.bin" <<'EOF2'
import struct, sys
h = [0] * 256
h[0:4] = [20240328, 2, 50257, 50256]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", *h))
    for i in range(50257):
        s = ("<|endoftext|>" if i == 50256 else "[%d]" % i).encode()
        f.write(bytes([len(s)]) + s)
EOF2
if "$SAMPLE" --model "$D/gpt2v.bin" --tokenizer "$D/tok.bin" --len 5 --prompt 50256,7 \
       >"$D/tsample" 2>"$D/err" && grep -q '^<|endoftext|>\[7\]\(\[[0-9]*\]\)\{5\}$' "$D/tsample"; then
    echo "ok: sample_gpt with a tokenizer: $(cat "$D/tsample")"
else
    fail "sample_gpt with a tokenizer"; cat "$D/tsample" "$D/err"
fi

# ---- --help: status 0, every flag of the issue with its default.
checks=$((checks + 1))
if "$TRAIN" --help >"$D/help" 2>&1; then
    missing=""
    for f in layers heads dim seq vocab init data text val-data batch total-batch steps lr \
             lr-schedule warmup min-lr-frac beta1 beta2 eps weight-decay grad-clip seed shuffle \
             eval-every sample-every save save-every resume save-model metrics device peak-tflops; do
        grep -q -- "--$f .*(default: " "$D/help" || missing="$missing $f"
    done
    if [ -n "$missing" ]; then fail "--help lacks:$missing"; else echo "ok: --help lists every flag with its default"; fi
else
    fail "--help exit status"
fi
# ---- sample_gpt from a checkpoint directory.
checks=$((checks + 1))
if "$SAMPLE" --checkpoint "$D/ck_b" --len 8 --prompt "ab" --temperature 0 >"$D/csample" 2>"$D/err" &&
   [ "$(head -c 2 "$D/csample")" = "ab" ]; then
    echo "ok: sample_gpt --checkpoint DIR"
else
    fail "sample_gpt --checkpoint"; cat "$D/err"
fi

echo "test_train_cli: $checks checks"
finish
