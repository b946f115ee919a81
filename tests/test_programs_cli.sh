#!/bin/sh
# test_programs_cli.sh BINDIR - every program's command line, before any work: --help prints a
# usage naming the program's flags and exits 0; an unknown flag, a flag whose value is missing
# (the last argument) and a value that is not a number are refused with status 2 and a message
# on stderr naming the flag. (A lone trailing flag was once silently ignored by two benches,
# which then ran for minutes with their defaults.)
. "$(dirname "$0")/lib.sh"
BIN=$1
# program and one flag it takes with a number: the missing-value and non-number cases use it
for pf in "train_gpt --steps" "sample_gpt --len" "ct_plan --workers" "ct_pipeline --pp" \
          "ct_tune --budget" "bench_train --steps" "bench_gemm --reps" "bench_plan --steps" \
          "bench_tp --steps" "bench_dp --steps" "bench_moe --steps" "bench_pipeline --steps" \
          "bench_attention --reps" "bench_allreduce -n" "bench_clblast_lock --rounds" \
          "ct_plot --width"; do
    set -- $pf
    p=$1; flag=$2
    [ -x "$BIN/$p" ] || { fail "$p: not built"; continue; }
    # timeout: a program that ignores a bad flag starts its work; that must fail, not hang
    timeout 60 "$BIN/$p" --help >"$D/out" 2>"$D/err"; rc=$?
    if [ $rc -ne 0 ] || ! grep -qi -- "usage\|$p" "$D/out" "$D/err"; then fail "$p --help: status $rc"; continue; fi
    timeout 60 "$BIN/$p" --no-such-flag 1 >"$D/out" 2>"$D/err"; rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "--no-such-flag" "$D/err"; then
        fail "$p --no-such-flag: status $rc"; head -n 3 "$D/err"; continue
    fi
    timeout 60 "$BIN/$p" "$flag" >"$D/out" 2>"$D/err"; rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$flag" "$D/err"; then
        fail "$p $flag (no value): status $rc"; head -n 3 "$D/err"; continue
    fi
    timeout 60 "$BIN/$p" "$flag" x1 >"$D/out" 2>"$D/err"; rc=$?
    if [ $rc -ne 2 ] || [ ! -s "$D/err" ]; then
        fail "$p $flag x1 (not a number): status $rc"; head -n 3 "$D/err"; continue
    fi
    echo "ok: $p: --help 0; unknown flag, $flag without a value, $flag x1 refused with 2: $(head -n 1 "$D/err" | cut -c1-80)"
done
finish
