#!/bin/sh
# bench/gpu_session.sh OUT [SECTION...] - the measurements to make when a GPU is at hand, most
# valuable first, each bounded in time, so that a short loan of a GPU machine is spent measuring.
# Run from the repository root with the built programs on PATH (build/bin, or a bundle of them)
# and CT_DEVICE naming the GPU (default: gpu). Each section writes OUT/<section>.txt (its
# programs' output, exit status last) and whatever data files it names; a failing section is
# recorded and the next one runs. Record the figures in docs/BENCHMARKS.md with the device named.
#
# Sections (default: all of them, in this order; an estimated 20 minutes on an H100, so name a
# few per call where a call's time is limited):
#   devices    ct_devices -v (the device, its largest single allocation)
#   mma        issue 28: test_cl_gemm_bf16 and test_cl_gemm_tf32 on the GPU (every bf16 path and
#              the tf32 path, their probes, against the double reference), then bench_gemm
#              --paths clblast,portable,mma,mma-tf32 --csv (the tensor-core kernels' rates against
#              CLBlast's fp32 on the engine's shapes), and bench_gemm_torch.py: the same rows
#              against torch.matmul fp32 (TF32 off), bf16 and tf32 (allow_tf32) on CUDA. Target:
#              mma's geometric mean >= 0.4x torch bf16's
#   attention  issue 28 item 4: test_engine_ops_bf16 mma on the GPU (the fused attention's mma
#              variant, with the real instructions where the mma path's rule and probe pass, and
#              emulated, against the double reference at head sizes 32, 64, 128), then
#              bench_attention --mma on: the variant against the scalar fused kernels, both bf16,
#              at GPT-2 124M's heads (hs 64, NH 12, B 8) and hs 128 (NH 6), T 256 to 2048
#   bf16train  issue 28: bench_train --precision bf16 --gemm auto at GPT-2 124M, T 1024, B 8 (the
#              auto record and its per-shape lines in the output; the record copied to
#              OUT/tune/), then bench_train_torch.py --precision bf16 (autocast) on the same GPU.
#              Target: ours >= 0.5x PyTorch's tokens/s
#   recompute  issue 14: bench_train --recompute all at the 124m shape, T 1024, B 4, on the GEMM
#              and the fused attention paths: each mode's step time and activation memory
#              against none's (target: attention mode <= 1.10x the time for >= 2x less memory)
#   tp         issue 9: bench_tp, two workers sharing the GPU, SP off and on, TP's collectives
#              staged through the host and kept on the device (--tp-comm host|device), tiny and
#              the 124m shape at T 64 (target: exposed TP communication < 15 % of the step)
#   arena      the activation arena cut at the device's real limit: train_gpt at the 124m shape
#              with GPT-2's vocabulary, B 16, T 1024 (about 23 GiB of activations, above the
#              H100's 19.8 GiB buffer), 4 steps, against --max-alloc-mb 4096: the losses must be
#              bitwise the same
#   state      the model state (parameters, gradients, m, v) cut: the 124m shape (byte vocabulary,
#              340 MB of parameters) with --max-alloc-mb 100 against one buffer each, 10 steps:
#              losses within 1e-6
#   train      bench_train tiny and 124m; bench_train_torch.py --device cuda (the same step in
#              PyTorch on the same GPU, fp32, TF32 off) when python3 has torch with CUDA
#   gemm       bench_gemm (CLBlast against OpenBLAS on the engine's shapes)
#   layouts    train_gpt with two workers on the one GPU (dp 2 ZeRO 1, tp 2 SP, pp 2 1f1b),
#              20 steps each against one worker: losses within 1e-5
#   lock       bench_clblast_lock with two handles on the one GPU (--device GPU,GPU): a step's
#              GEMMs under the CLBlast lock taken shared against serialised as the single lock
#              did (issue 30 item 6; on PoCL the difference was below the noise)
#   tune       ct_tune --budget 200, the stored set copied to OUT/tune/ (bring it back to tune/
#              only if it beat the built-in parameters)
# CT_GPU_QUICK=1 shrinks every shape and step count (to try the script on a CPU device).
set -u
OUT=${1:?usage: bench/gpu_session.sh OUT [SECTION...]}
shift
mkdir -p "$OUT" || exit 1
: "${CT_DEVICE:=gpu}"
export CT_DEVICE
SECTIONS=${*:-devices mma attention bf16train recompute tp arena state train gemm layouts lock tune}
Q=${CT_GPU_QUICK:-0}
PY=${PYTHON:-python3}
status=0

# run SECTION SECONDS CMD...: CMD's output appended to OUT/SECTION.txt, bounded by SECONDS.
run() {
    _s=$1 _t=$2
    shift 2
    echo "\$ $*" >>"$OUT/$_s.txt"
    timeout "$_t" "$@" >>"$OUT/$_s.txt" 2>&1
    _rc=$?
    echo "exit status $_rc" >>"$OUT/$_s.txt"
    [ $_rc -eq 0 ] || { echo "$_s: '$1' exited with status $_rc" >&2; status=1; }
    return $_rc
}

# A text corpus for train_gpt (the tests' sentence, repeated).
text() {
    awk 'BEGIN { for (i = 0; i < 4000; i++) printf "the quick brown fox jumps over the lazy dog. " }' \
        >"$OUT/text.txt"
}

# same A B TOL: the losses of two metrics files agree (TOL 0: bitwise) at every step.
same() {
    $PY - "$1" "$2" "$3" <<'EOF'
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "train"}
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
worst = max((abs(a[s] - b[s]) / max(abs(a[s]), 1e-30) for s in a if s in b), default=1.0)
ok = a and sorted(a) == sorted(b) and (worst == 0 if tol == 0 else worst <= tol)
print("%s: %s vs %s, %d steps, largest relative difference %.2e (allowed %g)" %
      ("ok" if ok else "DIFFER", sys.argv[1], sys.argv[2], len(a), worst, tol))
sys.exit(0 if ok else 1)
EOF
}

# cut_says SECTION WHAT: the section's run reported WHAT (the activations, or the model state)
# held in several device buffers (else the comparison would not test a cut).
cut_says() {
    if grep -q "$2 *held in [0-9]* device buffers" "$OUT/$1.txt"; then return 0; fi
    echo "NOT CUT: no '$2 held in N device buffers' line" >>"$OUT/$1.txt"
    status=1
    return 1
}

if [ "$Q" = 1 ]; then # shapes small enough for a CPU device
    M124="--layers 2 --dim 64 --heads 4"
    LONG="--seq 64 --batch 2"
    TPS="--layers 1 --dim 64 --heads 4 --seq 32 --vocab 256 --steps 1 --warmup 0"
    STEPS=2 BIG_B=2 BIG_T=64 SMALL_MB=0.3 GPT2V="" CUT="--max-alloc-mb 0.5" RCFG=tiny
else
    M124="--layers 12 --dim 768 --heads 12"
    LONG="--seq 1024 --batch 4"
    TPS="--steps 6 --warmup 1"
    STEPS=10 BIG_B=16 BIG_T=1024 SMALL_MB=100 GPT2V="--vocab 50257" CUT="" RCFG=124m
fi
TRAIN_ARGS="--lr 3e-4 --warmup 2 --grad-clip 1 --text $OUT/text.txt --sample-len 0 --eval-every 0"

for s in $SECTIONS; do
    : >"$OUT/$s.txt"
    echo "== $s ($(date -u +%H:%M:%S))" >&2
    case $s in
    devices) run devices 60 ct_devices -v ;;
    recompute)
        for path in gemm fused; do
            run recompute 300 bench_train --config $RCFG $LONG --recompute all --attention "$path" \
                --steps "$STEPS" --warmup 2 --profile-steps 0
        done ;;
    tp)
        for shape in tiny 124m; do
            args=$TPS
            [ "$shape" = 124m ] && [ "$Q" != 1 ] && args="$TPS $M124 --seq 64"
            for comm in host device; do
                for sp in 0 1; do
                    run tp 200 bench_tp --devices-per-rank 2 --sp "$sp" --tp-comm "$comm" $args
                done
            done
        done ;;
    arena)
        text
        A="$M124 --seq $BIG_T --batch $BIG_B --total-batch $((BIG_B * BIG_T)) --steps 4 \
           --max-seq $BIG_T --attention gemm $GPT2V $TRAIN_ARGS"
        run arena 280 train_gpt $A $CUT --metrics "$OUT/arena_real.jsonl" &&
            cut_says arena "^" &&
            run arena 280 train_gpt $A --max-alloc-mb 4096 --metrics "$OUT/arena_4g.jsonl" &&
            same "$OUT/arena_real.jsonl" "$OUT/arena_4g.jsonl" 0 >>"$OUT/arena.txt" 2>&1 ||
            status=1 ;;
    state)
        text
        A="$M124 --seq 64 --batch 4 --total-batch 512 --steps $STEPS $TRAIN_ARGS"
        run state 200 train_gpt $A --metrics "$OUT/state_one.jsonl" &&
            run state 200 train_gpt $A --max-alloc-mb "$SMALL_MB" --metrics "$OUT/state_cut.jsonl" &&
            cut_says state "model state .*" &&
            same "$OUT/state_one.jsonl" "$OUT/state_cut.jsonl" 1e-6 >>"$OUT/state.txt" 2>&1 ||
            status=1 ;;
    train)
        if [ "$Q" = 1 ]; then
            run train 120 bench_train --config tiny --seq 32 --batch 2 --steps 1 --warmup 0 \
                --profile-steps 0
        else
            run train 300 bench_train --config all --steps 10 --warmup 3
            if $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
                2>/dev/null; then
                run train 300 $PY bench/bench_train_torch.py --device cuda --config all \
                    --steps 10 --warmup 3
            else
                echo "no PyTorch with CUDA here: the PyTorch side was not run" >>"$OUT/train.txt"
            fi
        fi ;;
    mma)
        run mma 300 test_cl_gemm_bf16
        run mma 200 test_cl_gemm_tf32
        if [ "$Q" = 1 ]; then
            run mma 120 bench_gemm --quick --no-tune --csv --paths clblast,portable,mma,mma-tf32
        else run mma 300 bench_gemm --csv --paths clblast,portable,mma,mma-tf32; fi
        # the same rows beside torch.matmul (fp32 TF32 off, bf16) on the same GPU
        awk '/^shape,m,n,k,/ { on = 1 } on && /,/ && !/^#/' "$OUT/mma.txt" >"$OUT/gemm_paths.csv"
        if $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
            run mma 300 $PY bench/bench_gemm_torch.py --csv "$OUT/gemm_paths.csv" --device cuda \
                >/dev/null
        else
            echo "no PyTorch with CUDA here: torch.matmul was not run" >>"$OUT/mma.txt"
        fi ;;
    attention)
        run attention 300 test_engine_ops_bf16 mma
        if [ "$Q" = 1 ]; then # PoCL has no mma path: the emulated variant checks the bench
            run attention 120 bench_attention --mma emulated --T 64 --B 1 --NH 2 --hs 64 --reps 1
        else
            run attention 200 bench_attention --mma on --T 256,1024,2048 --B 8 --NH 12 --hs 64
            run attention 200 bench_attention --mma on --T 256,1024,2048 --B 8 --NH 6 --hs 128
        fi ;;
    bf16train)
        # a tuning folder of the section's own: auto measures here and its record comes back
        # (the user's CLBlast sets copied in, the user's program cache linked: nothing rebuilt)
        real=${XDG_CACHE_HOME:-$HOME/.cache}/cltrain
        mkdir -p "$OUT/tune" "$OUT/cache/cltrain" "$real/programs"
        cp "$real"/tune/*.txt "$OUT/tune/" 2>/dev/null
        rm -f "$OUT"/tune/*.gemm.txt
        ln -sfn "$OUT/tune" "$OUT/cache/cltrain/tune"
        ln -sfn "$real/programs" "$OUT/cache/cltrain/programs"
        if [ "$Q" = 1 ]; then
            B16="--config tiny --seq 32 --batch 2 --steps 1 --warmup 0"
        else
            B16="--config 124m --seq 1024 --batch 8 --steps 10 --warmup 3"
        fi
        ( export XDG_CACHE_HOME="$OUT/cache" &&
            run bf16train 400 bench_train $B16 --precision bf16 --gemm auto --profile-steps 0 )
        [ $? -eq 0 ] || status=1
        grep -q "gemm paths: bf16 products: auto" "$OUT/bf16train.txt" ||
            { echo "NO GEMM PLAN LINE" >>"$OUT/bf16train.txt"; status=1; }
        if [ "$Q" = 1 ] && $PY -c 'import torch' 2>/dev/null; then
            run bf16train 120 $PY bench/bench_train_torch.py $B16 --precision bf16 --threads 2
        elif [ "$Q" = 1 ]; then
            echo "no PyTorch in $PY: the PyTorch side was not run" >>"$OUT/bf16train.txt"
        elif $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
            2>/dev/null; then
            run bf16train 300 $PY bench/bench_train_torch.py --device cuda $B16 --precision bf16
        else
            echo "no PyTorch with CUDA here: the PyTorch side was not run" >>"$OUT/bf16train.txt"
        fi ;;
    gemm)
        if [ "$Q" = 1 ]; then run gemm 120 bench_gemm --quick --no-tune
        else run gemm 300 bench_gemm --csv; fi ;;
    layouts)
        text
        A="--layers 4 --dim 128 --heads 4 --seq 64 --batch 8 --total-batch 1024 --steps 20 \
           $TRAIN_ARGS --lr 1e-3"
        run layouts 120 train_gpt $A --metrics "$OUT/lay_one.jsonl"
        for lay in "dp2|--dp 2 --zero 1" "tp2|--tp 2 --sequence-parallel 1" \
            "pp2|--pp 2 --schedule 1f1b"; do
            name=${lay%%|*} flags=${lay#*|}
            run layouts 180 train_gpt $A --devices-per-rank 2 --workers-per-device 2 $flags \
                --metrics "$OUT/lay_$name.jsonl" &&
                same "$OUT/lay_one.jsonl" "$OUT/lay_$name.jsonl" 1e-5 >>"$OUT/layouts.txt" 2>&1 ||
                status=1
        done ;;
    lock)
        if [ "$Q" = 1 ]; then
            run lock 120 bench_clblast_lock --device "$CT_DEVICE,$CT_DEVICE" --C 128 --BT 64 \
                --layers 2 --rounds 3
        else
            for cfg in "--C 768 --BT 1024 --layers 12" "--C 256 --BT 256 --layers 12"; do
                # shellcheck disable=SC2086
                run lock 200 bench_clblast_lock --device "$CT_DEVICE,$CT_DEVICE" $cfg --rounds 20
            done
        fi ;;
    tune)
        mkdir -p "$OUT/tune"
        if [ "$Q" = 1 ]; then
            run tune 300 ct_tune --budget 20 --max-candidates 2 --store-dir "$OUT/tune"
        else
            run tune 400 ct_tune --budget 200 --store-dir "$OUT/tune"
        fi ;;
    *) echo "unknown section '$s' (see the head of $0)" >&2; status=2 ;;
    esac
done
exit $status
