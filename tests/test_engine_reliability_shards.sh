#!/bin/sh
# test_engine_reliability_shards.sh TRAIN_GPT MPIEXEC PART - sharded checkpoints (issue 30):
#   resume   written at dp 4 with ZeRO-3 (2 ranks x 2 threads, --save-format sharded): one shard
#            per worker beside the manifest; resumed on the same layout the losses and gradient
#            norms are bitwise those of the uninterrupted run (the records' digits), at tp 2 x pp 2
#            and on one device within 1e-5 relative.
#   async    --save-async 1 writes the same files as a synchronous save (shards byte for byte,
#            manifests section for section but META, which holds the flags), sharded at dp 4 and
#            gathered on one device, with --keep-last 2 pruning in the background, and the losses
#            are bitwise the same.
#   kill     2 ranks save a larger model every step; the process writing a shard (the pid in its
#            temporary's name) is SIGKILLed: DIR/latest still names a whole checkpoint, the next
#            start removes what the killed save left (temporaries, orphaned shards) and resumes.
#   killat   2 ranks (dp 2, ZeRO-1: both shards hold state) save every 2 steps; the process of a
#            chosen worker is SIGKILLed inside the save of step 4 (train_gpt's CT_TEST_SAVE_KILL,
#            ct_engine_train_test.h): worker 1 right after its shard is on disk, and worker 0
#            with every shard on disk and no manifest yet. Each time DIR/latest still names step
#            2's checkpoint, step 4 has shards but no manifest, and the next start removes them
#            and resumes from step 2 with losses and norms bitwise those of the uninterrupted run.
#   oom      3 ranks save sharded every step while host allocation N of worker 1 fails, for 16
#            consecutive N (one whole step and save: the notes' exchange, its agreements, the
#            shard's write, the step's own collectives): every run ends with status != 0 and
#            one message naming the memory, never through CT_COMM_TIMEOUT (a worker left
#            waiting in a save the others gave up; before the fix 15 of 21 such runs did).
# Every run is under `timeout` (lib.sh's train through launch; the kill part its own).
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
PART=$3

text_file 300
ARGS="--layers 4 --heads 4 --dim 32 --seq 16 --batch 4 --total-batch 128 --steps 10 --lr 3e-3 \
      --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 --peak-tflops 1"
CMP_NORMS=1

# bitwise A.jsonl B.jsonl WHAT FIRST: the train records' loss and grad_norm text equal from FIRST
bitwise() {
    if $PY - "$1" "$2" "$3" "$4" <<'PYEOF'; then :; else fail "$3"; fi
import re, sys
def steps(p):
    out = {}
    for line in open(p):
        if '"type":"train"' not in line: continue
        s = int(re.search(r'"step":(\d+)', line).group(1))
        out[s] = (re.search(r'"loss":([^,]+)', line).group(1), re.search(r'"grad_norm":([^,]+)', line).group(1))
    return out
a, b, what, first = steps(sys.argv[1]), steps(sys.argv[2]), sys.argv[3], int(sys.argv[4])
keys = [s for s in sorted(a) if s >= first]
bad = [s for s in keys if b.get(s) != a[s]]
print("%s %s: steps %d-%d, loss and norm %s" % ("ok:" if keys and not bad else "  ", what,
      keys[0] if keys else -1, keys[-1] if keys else -1,
      "bitwise equal" if not bad else "differ at %s: %s vs %s" % (bad[0], a[bad[0]], b.get(bad[0]))))
sys.exit(0 if keys and not bad else 1)
PYEOF
}

# samefiles DIR_A DIR_B WHAT: the same file names; shards and latest byte for byte; checkpoint
# files section for section but META
samefiles() {
    if $PY - "$1" "$2" "$3" <<'PYEOF'; then :; else fail "$3"; fi
import os, struct, sys
a, b, what = sys.argv[1:4]
def sections(p):
    d = open(p, "rb").read()
    out, at = {}, 16
    for _ in range(struct.unpack_from("<I", d, 12)[0]):
        tag = d[at:at + 8].rstrip(b"\0").decode()
        n = struct.unpack_from("<Q", d, at + 8)[0]
        if tag != "META": out[tag] = d[at + 24:at + 24 + n]
        at += 24 + n
    return d[:16], out
na, nb = sorted(os.listdir(a)), sorted(os.listdir(b))
bad = [] if na == nb else ["names: %s vs %s" % (na, nb)]
for n in (na if na == nb else []):
    pa, pb = os.path.join(a, n), os.path.join(b, n)
    if n.endswith(".bin"):
        if sections(pa) != sections(pb): bad.append(n)
    elif open(pa, "rb").read() != open(pb, "rb").read(): bad.append(n)
print("%s %s: %d files (%d shards)%s" % ("ok:" if not bad else "  ", what, len(na),
      sum(".shard_" in n for n in na), ", differ: " + ", ".join(bad) if bad else ", the same"))
sys.exit(1 if bad else 0)
PYEOF
}

if want resume; then
    if train full 2 2 --dp 4 --zero 3 --save-format sharded --save "$D/ck" --save-every 5; then
        n=$(ls "$D/ck" | grep -c '^ckpt_00000005\.shard_0000[0-3]$')
        if [ "$n" -ne 4 ] || [ ! -s "$D/ck/ckpt_00000005.bin" ] ||
            [ "$(cat "$D/ck/latest")" != "ckpt_00000010.bin" ]; then
            fail "dp 4 sharded save: $n shards of step 5, latest $(cat "$D/ck/latest")"; ls -l "$D/ck"
        else
            echo "ok: dp 4 ZeRO-3 saved $(ls "$D/ck" | grep -c shard) shards and 2 manifests; latest $(cat "$D/ck/latest")"
        fi
        train res4 2 2 --dp 4 --zero 3 --resume "$D/ck/ckpt_00000005.bin" &&
            bitwise "$D/full.jsonl" "$D/res4.jsonl" "resume dp 4 ZeRO-3 -> dp 4 ZeRO-3" 5
        train restp 2 2 --tp 2 --pp 2 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/full.jsonl" "$D/restp.jsonl" "resume dp 4 ZeRO-3 -> tp 2 x pp 2" 5
        train res1 1 1 --resume "$D/ck/ckpt_00000005.bin" &&
            compare "$D/full.jsonl" "$D/res1.jsonl" "resume dp 4 ZeRO-3 -> 1 device" 5
    fi
fi

if want async; then
    S="--steps 6 --save-every 2 --keep-last 2"
    if train zs 2 2 --dp 4 --zero 3 --save-format sharded --save "$D/zs" $S &&
        train za 2 2 --dp 4 --zero 3 --save-format sharded --save "$D/za" $S --save-async 1; then
        samefiles "$D/zs" "$D/za" "dp 4 ZeRO-3 sharded: --save-async 1 vs synchronous"
        bitwise "$D/zs.jsonl" "$D/za.jsonl" "dp 4 ZeRO-3: training beside a background save" 0
        logsays "$D/za.log" "saving checkpoint $D/za/ckpt_00000002.bin in the background"
        logsays "$D/za.log" "saved checkpoint $D/za/ckpt_00000006.bin (written in the background"
    fi
    if train gs 1 1 --save "$D/gs" $S && train ga 1 1 --save "$D/ga" $S --save-async 1; then
        samefiles "$D/gs" "$D/ga" "1 device gathered: --save-async 1 vs synchronous"
        bitwise "$D/gs.jsonl" "$D/ga.jsonl" "1 device: training beside a background save" 0
    fi
    refused "--save-async without --save" "--save-async needs --save DIR" 1 1 --save-async 1
    refused "a bad --save-format" "--save-format must be auto, gathered or sharded" 1 1 --save "$D/x" \
        --save-format zip
fi

if want kill; then
    # 2 ranks, a model of 1.6 M parameters (a shard of about 9.5 MB each save)
    K="--layers 2 --heads 4 --dim 256 --seq 32 --batch 4 --lr 1e-3 --text $D/text.txt \
       --sample-len 0 --eval-every 0 --peak-tflops 1 --dp 2 --save-format sharded --save $D/kk \
       --save-every 1 --keep-last 3"
    killed="" caught=0
    for try in 1 2 3; do
        : >"$D/k.out"
        POCL_DEVICES=pthread timeout 60 "$MPIEXEC" -n 2 "$TRAIN" $K --steps 1000 \
            >"$D/k.out" 2>"$D/k.err" &
        job=$!
        i=0 victim=""
        while [ $i -lt 3000 ] && [ -z "$victim" ]; do
            if [ "$(grep -c '^saved checkpoint' "$D/k.out")" -ge 2 ]; then
                victim=$(ls "$D/kk" 2>/dev/null | sed -n 's/^ckpt_[0-9]*\.shard_[0-9]*\.tmp\.\([0-9]*\)\..*/\1/p' | head -n 1)
            fi
            [ -z "$victim" ] && sleep 0.005
            i=$((i + 1))
        done
        [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null && killed=$victim
        sleep 0.2
        left=$(ls "$D/kk" | grep -c '\.tmp\.' || true)
        kill -TERM $job 2>/dev/null
        wait $job 2>/dev/null
        if [ -n "$killed" ]; then
            [ "$left" -gt 0 ] && caught=1
            break
        fi
    done
    latest=$(cat "$D/kk/latest" 2>/dev/null)
    step=$(echo "$latest" | sed 's/ckpt_0*\([0-9]*\)\.bin/\1/')
    if [ -z "$killed" ]; then
        fail "kill: no shard temporary seen in 3 tries"
    elif [ -z "$step" ]; then
        fail "kill: no DIR/latest after the kill"; ls -l "$D/kk"
    else
        echo "ok: SIGKILLed writer $killed $([ $caught = 1 ] && echo 'with its shard temporary on disk' || echo 'just after its shard went to disk'); latest: $latest"
        # the latest checkpoint reads whole (every shard, every CRC) and resumes
        logged "$D/r.out" "$D/r.err" env POCL_DEVICES=pthread timeout 120 "$MPIEXEC" -n 2 "$TRAIN" \
            $K --resume "$D/kk" --steps $((step + 1)) --save-every 0
        rc=$?
        if [ $rc -ne 0 ] || ! grep -q "^step *$((step + 1))/" "$D/r.out"; then
            fail "kill: resuming from $latest: status $rc"; tail -n 5 "$D/r.err"
        else
            echo "ok: resumed from $latest and trained step $((step + 1)); at start: $(grep removed "$D/r.err" | cut -c12-220)"
        fi
        if ls "$D/kk" | grep -q '\.tmp\.'; then
            fail "kill: temporaries left after the restart: $(ls "$D/kk" | grep '\.tmp\.')"
        fi
    fi
fi

if want killat; then
    KA="--dp 2 --zero 1 --steps 8 --save-every 2"
    if train kfull 2 1 $KA --save "$D/kf"; then
        for at in 1:shard 0:manifest; do
            rm -rf "$D/ka"
            w=${at%%:*} point=${at#*:}
            logged "$D/ka.log" "$D/ka.log" env CT_TEST_SAVE_KILL="$w:4:$point" POCL_DEVICES=pthread \
                timeout 60 "$MPIEXEC" -n 2 "$TRAIN" $ARGS $KA --devices-per-rank 1 --save "$D/ka"
            rc=$?
            left=$(cd "$D/ka" && ls | tr '\n' ' ')
            if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$(cat "$D/ka/latest")" != "ckpt_00000002.bin" ] ||
                [ -e "$D/ka/ckpt_00000004.bin" ] || ! ls "$D/ka" | grep -q '^ckpt_00000004\.shard_'; then
                fail "killat $point (worker $w): status $rc, latest $(cat "$D/ka/latest" 2>/dev/null), left: $left"
                tail -n 5 "$D/ka.log"
                continue
            fi
            echo "ok: worker $w killed at $point of step 4's save (status $rc): latest $(cat "$D/ka/latest"); left: $left"
            if train kres 2 1 $KA --resume "$D/ka" --save "$D/ka"; then
                bitwise "$D/kfull.jsonl" "$D/kres.jsonl" "killed at $point, resumed from step 2" 3
                logsays "$D/kres.log" "ckpt_00000004.shard_0000$w"
            fi
        done
    fi
fi

if want oom; then
    TINY="--layers 1 --heads 2 --dim 16 --seq 8 --sample-len 0 --eval-every 0 --peak-tflops 1"
    for n in $(seq 2000 2015); do
        rm -rf "$D/oo"
        : >"$D/o.err"
        t0=$(date +%s.%N)
        CT_COMM_TIMEOUT=20 CT_TEST_FAIL_ALLOC=1:$n:host timeout 60 "$MPIEXEC" -n 3 "$TRAIN" $TINY \
            --batch 6 --text "$D/text.txt" --steps 400 --dp 3 --save "$D/oo" --save-every 1 \
            --save-format sharded >/dev/null 2>"$D/o.err"
        rc=$?
        secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        if pocl_aborted $rc "$D/o.err"; then continue; fi
        nmem=$(grep -c "memory" "$D/o.err")
        if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$nmem" -ne 1 ] || grep -q CT_COMM_TIMEOUT "$D/o.err" ||
            awk -v a="$secs" 'BEGIN { exit !(a > 40) }'; then
            fail "oom at host allocation $n of worker 1: status $rc after $secs s, $nmem memory messages"
            cat "$D/o.err"
        else
            echo "ok: allocation $n: status $rc after $secs s: $(grep 'error' "$D/o.err" | cut -c1-160)"
        fi
    done
fi

finish
