#!/bin/sh
# test_engine_reliability.sh TRAIN_GPT MPIEXEC PART - train_gpt when things go wrong (issue 13;
# docs/RELIABILITY.md). PART:
#   nonfinite    a learning rate that overflows (1e4, clipping off): the non-finite steps are
#                skipped with a warning and a "skipped":true record, the run stops at
#                --max-skips in a row with exit 1 and one message naming the step and the first
#                tensor that is not finite; --nonfinite stop stops at the first; the same under
#                dp = 2 threads, dp = 2 ranks, pp = 2 ranks and tp = 2 threads (the message printed
#                once).
#   checkpoints  temporaries of a writer that is gone are removed at start (and said so), those
#                of a live process stay; --keep-last 2 leaves two checkpoints, latest among them,
#                and the run resumes from it.
#   failures     an error on one worker only ends every worker within 10 s, its message printed
#                once: a file only rank 2 of 3 cannot read (mpiexec MPMD), a device allocation
#                only worker 2 of 3 cannot make (CT_TEST_FAIL_ALLOC), the same for a worker
#                thread (1 rank x 2 threads) and in a mixed layout (2 ranks x 2 threads).
# Every run is under `timeout`, so a hang fails the test instead of stalling the suite.
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=$3

text_file 200
TINY="--layers 1 --heads 2 --dim 16 --seq 8 --sample-len 0 --eval-every 0 --peak-tflops 1"

# run SECONDS OUT ERR cmd...: status in $rc, wall time in $secs (integer); through lib.sh's
# logged (once more after PoCL's dlhandle-cache abort)
run() {
    lim=$1 out=$2 err=$3
    shift 3
    t0=$(date +%s)
    logged "$out" "$err" timeout "$lim" "$@"
    rc=$?
    secs=$(( $(date +%s) - t0 ))
}

count() { grep -c -- "$1" "$2" 2>/dev/null || true; }

if want nonfinite; then
    BAD="$TINY --batch 4 --text $D/text.txt --lr 1e4 --grad-clip 0 --warmup 0 --steps 12"
    for layout in one threads ranks pipeline tensor; do
        case $layout in
        one) cmd="$TRAIN $BAD" ;;
        threads) cmd="env POCL_DEVICES=pthread\ pthread $TRAIN $BAD --dp 2 --devices-per-rank 2" ;;
        ranks) cmd="$MPIEXEC -n 2 $TRAIN $BAD --dp 2" ;;
        pipeline) cmd="$MPIEXEC -n 2 $TRAIN $BAD --layers 2 --pp 2 --total-batch 64" ;;
        tensor) cmd="env POCL_DEVICES=pthread\ pthread $TRAIN $BAD --tp 2 --devices-per-rank 2" ;;
        esac
        # skip: 3 in a row stop the run
        run 120 "$D/out" "$D/err" sh -c "$cmd --max-skips 3 --metrics $D/m.jsonl"
        nerr=$(count "train_gpt: error" "$D/err")
        nskip=$(count '"skipped":true' "$D/m.jsonl")
        nwarn=$(count "skipped: gradient norm" "$D/err")
        if [ $rc -ne 1 ] || [ "$nerr" -ne 1 ] || [ "$nskip" -ne 3 ] || [ "$nwarn" -ne 2 ] ||
            ! grep -q "3 skipped steps in a row (--max-skips 3)" "$D/err" ||
            ! grep -q "first tensor that is not finite is the gradient of" "$D/err"; then
            fail "$layout, --max-skips 3: status $rc, $nerr error lines, $nskip skipped records, $nwarn warnings"
            cat "$D/err"
        else
            echo "ok: $layout: skipped 3 steps in a row, then: $(grep 'train_gpt: error' "$D/err" | cut -c1-240)"
        fi
        # stop: the first non-finite step ends the run
        run 120 "$D/out" "$D/err" sh -c "$cmd --nonfinite stop"
        nerr=$(count "train_gpt: error" "$D/err")
        if [ $rc -ne 1 ] || [ "$nerr" -ne 1 ] || ! grep -q "step 2: .*--nonfinite stop" "$D/err"; then
            fail "$layout, --nonfinite stop: status $rc, $nerr error lines"
            cat "$D/err"
        else
            echo "ok: $layout: --nonfinite stop: $(grep 'train_gpt: error' "$D/err" | cut -c1-160)"
        fi
    done
    # a bad value is refused up front
    run 60 "$D/out" "$D/err" $TRAIN $TINY --text "$D/text.txt" --nonfinite ignore
    if [ $rc -ne 2 ] || ! grep -q "\-\-nonfinite must be skip or stop" "$D/err"; then
        fail "--nonfinite ignore: status $rc"; cat "$D/err"
    else
        echo "ok: --nonfinite ignore refused: $(head -n 1 "$D/err")"
    fi
fi

if want checkpoints; then
    CK="$TINY --batch 2 --text $D/text.txt --save $D/ck"
    mkdir -p "$D/ck"
    sh -c 'exit 0' &
    dead=$!
    wait $dead
    printf 'partial' >"$D/ck/ckpt_00000007.bin.tmp.$dead"
    printf 'partial' >"$D/ck/latest.tmp.$dead"
    printf 'busy' >"$D/ck/ckpt_00000008.bin.tmp.$$" # this shell is alive: not stale
    run 120 "$D/out" "$D/err" $TRAIN $CK --steps 5 --save-every 1 --keep-last 2
    left=$(cd "$D/ck" && ls ckpt_*.bin 2>/dev/null | tr '\n' ' ')
    if [ $rc -ne 0 ] || ! grep -q "removed 2 stale temporary files" "$D/err" ||
        [ -e "$D/ck/ckpt_00000007.bin.tmp.$dead" ] || [ -e "$D/ck/latest.tmp.$dead" ] ||
        [ ! -e "$D/ck/ckpt_00000008.bin.tmp.$$" ]; then
        fail "stale temporaries: status $rc"; cat "$D/err"; ls -la "$D/ck"
    else
        echo "ok: $(grep 'removed' "$D/err" | cut -c1-200); the live one stayed"
    fi
    if [ "$left" != "ckpt_00000004.bin ckpt_00000005.bin " ] ||
        [ "$(cat "$D/ck/latest")" != "ckpt_00000005.bin" ]; then
        fail "--keep-last 2 left: $left (latest: $(cat "$D/ck/latest"))"
    else
        echo "ok: --keep-last 2 after 5 saves left: $left"
    fi
    run 120 "$D/out" "$D/err" $TRAIN $TINY --batch 2 --text "$D/text.txt" --resume "$D/ck" \
        --save "$D/ck" --steps 7 --save-every 1 --keep-last 2
    left=$(cd "$D/ck" && ls ckpt_*.bin 2>/dev/null | tr '\n' ' ')
    if [ $rc -ne 0 ] || ! grep -q "^step     7/7" "$D/out" ||
        [ "$left" != "ckpt_00000006.bin ckpt_00000007.bin " ]; then
        fail "resume after pruning: status $rc, left $left"; cat "$D/err"
    else
        echo "ok: resumed from the newest kept checkpoint to step 7; left: $left"
    fi
    run 60 "$D/out" "$D/err" $TRAIN $TINY --text "$D/text.txt" --keep-last 2
    if [ $rc -ne 2 ] || ! grep -q "keep-last needs --save" "$D/err"; then
        fail "--keep-last without --save: status $rc"; cat "$D/err"
    fi
fi

if want failures; then
    F="$TINY --batch 6 --text $D/text.txt --steps 400"
    # run_watch cmd...: like run, and $after = seconds from the first "error" line on stderr to
    # the end of every process (what "every rank exits within 10 s" measures); once more after
    # PoCL's dlhandle-cache abort
    run_watch() {
        run_watch_once "$@"
        if pocl_aborted $rc "$D/err"; then run_watch_once "$@"; fi
    }
    run_watch_once() {
        : >"$D/err"
        : >"$D/out"
        t0=$(date +%s.%N)
        timeout 60 "$@" >"$D/out" 2>"$D/err" &
        pid=$!
        terr=""
        while kill -0 $pid 2>/dev/null; do
            if [ -z "$terr" ] && grep -q "train_gpt: error" "$D/err" 2>/dev/null; then
                terr=$(date +%s.%N)
            fi
            sleep 0.1
        done
        wait $pid
        rc=$?
        t1=$(date +%s.%N)
        [ -n "$terr" ] || terr=$t1
        after=$(awk -v a="$terr" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    }
    # expect_end WHAT MESSAGE: every worker gone within 10 s of the error, status != 0, the
    # message once
    expect_end() {
        n=$(count "$2" "$D/err")
        if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$n" -ne 1 ] ||
            awk -v a="$after" 'BEGIN { exit !(a > 10) }'; then
            fail "$1: status $rc, all gone $after s after the error (run $secs s), message '$2' $n times"
            cat "$D/err"
        else
            echo "ok: $1: status $rc, all gone $after s after the error (run $secs s): $(grep -- "$2" "$D/err" | cut -c1-200)"
        fi
    }
    run_watch "$MPIEXEC" -n 2 $TRAIN $F --dp 3 : -n 1 $TRAIN $F --dp 3 \
        --text "$D/missing.txt"
    expect_end "3 ranks, a file only rank 2 cannot read" "cannot open $D/missing.txt"
    run_watch env CT_TEST_FAIL_ALLOC=2:1:device "$MPIEXEC" -n 3 $TRAIN $F --dp 3
    expect_end "3 ranks, a device allocation only worker 2 cannot make" "refused by the allocation hook"
    run_watch env CT_TEST_FAIL_ALLOC=1:1:device "POCL_DEVICES=pthread pthread" \
        $TRAIN $F --batch 4 --dp 2 --devices-per-rank 2
    expect_end "1 rank x 2 threads, worker thread 1 cannot allocate" "refused by the allocation hook"
    run_watch env CT_TEST_FAIL_ALLOC=3:1:device "POCL_DEVICES=pthread pthread" \
        "$MPIEXEC" -n 2 $TRAIN $F --batch 4 --dp 4 --devices-per-rank 2
    expect_end "2 ranks x 2 threads, worker 3 cannot allocate" "refused by the allocation hook"
    # a host allocation of worker 1 that fails in the middle of training (its 2000th: past the
    # set-up, among the steps' and the checkpoints' allocations), with each checkpoint form (the
    # default, auto, is sharded here; test_engine_reliability_shards_oom sweeps a whole step)
    for form in sharded gathered; do
        rm -rf "$D/ck3"
        run_watch env CT_TEST_FAIL_ALLOC=1:2000:host "$MPIEXEC" -n 3 $TRAIN $F --dp 3 \
            --save "$D/ck3" --save-every 1 --save-format $form
        expect_end "3 ranks, worker 1 out of host memory during training ($form checkpoints)" "memory"
    done
    # a rank that stops answering (SIGSTOP: no error, no exit) after a few steps: the other one
    # gives up after CT_COMM_TIMEOUT = 3 s naming the collective and the peer, and the job ends
    : >"$D/out"
    : >"$D/err"
    t0=$(date +%s.%N)
    CT_COMM_TIMEOUT=3 timeout 60 "$MPIEXEC" -n 2 $TRAIN $F --batch 4 --dp 2 >"$D/out" 2>"$D/err" &
    pid=$!
    i=0
    while [ $i -lt 300 ] && ! grep -q "^step     3/" "$D/out" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    victim=$(pgrep -n -f "^$TRAIN ")
    [ -n "$victim" ] && kill -STOP "$victim"
    wait $pid
    rc=$?
    [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    n=$(count "CT_COMM_TIMEOUT" "$D/err")
    if [ -z "$victim" ] || [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$n" -ne 1 ] ||
        ! grep -q "within 3 s" "$D/err"; then
        fail "a stopped rank: status $rc after $secs s, timeout message $n times (victim $victim)"
        cat "$D/err"
    else
        echo "ok: a stopped rank: status $rc after $secs s: $(grep CT_COMM_TIMEOUT "$D/err" | cut -c1-220)"
    fi
fi

finish
