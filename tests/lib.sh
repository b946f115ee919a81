# tests/lib.sh - what the tests/*.sh scripts share. POSIX sh, sourced first thing (ctest runs the
# scripts as `sh tests/x.sh ...`):
#
#     . "$(dirname "$0")/lib.sh"
#     TRAIN=$1 MPIEXEC=$2 PART=${3:-all}
#     text_file 300
#     ARGS="--layers 2 --heads 2 --dim 32 --seq 16 --batch 4 --text $D/text.txt ..."
#     if want threads; then
#         need_ref
#         train t2 1 2 --dp 2 && compare "$D/ref.jsonl" "$D/t2.jsonl" "threads dp 2"
#     fi
#     finish
#
# Sourcing it turns on set -u and sets D (a scratch folder, removed at exit), PY (Debian's
# python3: torch and numpy are there), OMP_WAIT_POLICY=passive (idle OpenMP threads sleep instead
# of spinning on the shared cores) and fails=0. The helpers read TRAIN (train_gpt), MPIEXEC, ARGS
# (train_gpt's flags for every run) and PART when they are called, not when this is sourced.
#
#   fail MSG          says "FAIL: MSG" and counts it in $fails.
#   want PART [WITH...]
#                     true when this part runs: the script's $PART is "all", PART, or one of
#                     the parts WITH that bring PART along; each true answer is counted, so
#                     finish can fail a $PART that names no part.
#   text_file N       $D/text.txt: "the quick brown fox jumps over the lazy dog. " N times.
#   launch RANKS DEVICES cmd...
#                     cmd with POCL_DEVICES set to DEVICES pthread devices per process, under
#                     $MPIEXEC -n RANKS when RANKS > 1.
#   logged OUT ERR cmd...
#                     cmd with stdout in OUT and stderr in ERR (both in one file when OUT = ERR);
#                     a run that died of PoCL's abort in pocl_release_dlhandle_cache (below) is
#                     started once more, said with a NOTE line. Returns the last run's status.
#   pocl_aborted STATUS LOG
#                     true, after that NOTE line, when a run that ended with STATUS died of that
#                     abort (its stderr in LOG): for callers that start runs their own way.
#   train NAME RANKS DEVICES_PER_RANK args...
#                     train_gpt $ARGS --devices-per-rank DEVICES_PER_RANK --metrics $D/NAME.jsonl
#                     args, on that many PoCL devices per process, through launch and logged; its
#                     output in $D/NAME.log. A failure is counted and the log's tail shown; the
#                     status is non-zero then.
#   need_ref [NAME [args...]]
#                     the one-device reference run NAME (default ref) with args, unless
#                     $D/NAME.jsonl is already there; without it the script stops (status 1).
#                     A reference is computed once per build and shared by every part and
#                     script that asks for the same run: kept in $CT_REF_CACHE (default
#                     test-refs/ beside train_gpt's bin/), keyed on train_gpt's bytes, the
#                     flags ($D written as D) and the bytes of every file under $D they name;
#                     written under a temporary name and renamed, so tests running side by
#                     side never read half a file.
#   compare REF.jsonl OTHER.jsonl WHAT [FIRST_STEP]
#                     the "train" records' losses of every step >= FIRST_STEP of REF are in
#                     OTHER, within 1e-5 relative; with CMP_NORMS=1 the gradient norms too; with
#                     CMP_ALL_CLIPPED=1 REF's norm is above 0.3 (the scripts' --grad-clip) at
#                     every step, so that clipping, and the global norm under it, is exercised.
#   expect_refusal [--no-output FILE] WHAT MSG cmd...
#                     cmd exits with status 2 and MSG (a fixed string) on its stderr (and, with
#                     --no-output, leaves FILE absent or empty); its output in $D/stdout and
#                     $D/stderr.
#   refused WHAT MSG RANKS POCL_COUNT args...
#                     expect_refusal of train_gpt $ARGS --metrics $D/bad.jsonl args on
#                     POCL_COUNT PoCL devices per process (no --devices-per-rank added: the
#                     refusals try that flag too): status 2, MSG, no metrics written (refused
#                     before any work).
#   finish            "NAME PART: all passed" (status 0) or "NAME PART: N failure(s)" (status 1);
#                     also status 1 when $PART is neither "all" nor a part any want accepted.
#
# PoCL 3.1 with several of its devices in one process aborts now and then in its process-wide
# cache of compiled kernels (pocl_release_dlhandle_cache: Assertion `found->ref_count > 0'), more
# often with experts (1 in ~30 four-device MoE runs, bench_moe) but not only (a dense dp 2 x tp 2
# run as 4 threads); docs/LIMITS.md. A defect of PoCL, not of this engine:
# logged starts such a run once more and says so; any other failure, or the same abort twice,
# fails the test.
set -u
D=$(mktemp -d "/tmp/ct_$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$D"' EXIT
PY=/usr/bin/python3
export OMP_WAIT_POLICY=passive
fails=0
parts_ran=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# logsays FILE TEXT: the run's log must contain TEXT (what the run reported doing).
logsays() {
    if grep -qF -- "$2" "$1"; then echo "ok: $(basename "$1" .log) says '$2'"; else
        fail "$(basename "$1" .log): the log does not say '$2'"; fi
}

want() {
    _wa_part=$1
    shift
    for _wa_p in all "$_wa_part" "$@"; do
        if [ "$PART" = "$_wa_p" ]; then parts_ran=$((parts_ran + 1)); return 0; fi
    done
    return 1
}

text_file() {
    awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "the quick brown fox jumps over the lazy dog. " }' \
        >"$D/text.txt"
}

# The helpers' variables are global (POSIX sh has no local): each keeps its own prefix so that
# one helper calling another clobbers nothing.
launch() {
    _la_n=$1
    _la_pd=$(i=0; while [ $i -lt "$2" ]; do printf 'pthread '; i=$((i + 1)); done)
    shift 2
    if [ "$_la_n" -gt 1 ]; then
        POCL_DEVICES="$_la_pd" "$MPIEXEC" -n "$_la_n" "$@"
    else
        POCL_DEVICES="$_la_pd" "$@"
    fi
}

logged_once() {
    if [ "$1" = "$2" ]; then
        _lo_f=$1; shift 2; "$@" >"$_lo_f" 2>&1
    else
        _lo_o=$1 _lo_e=$2; shift 2; "$@" >"$_lo_o" 2>"$_lo_e"
    fi
}

pocl_aborted() {
    [ "$1" -ne 0 ] && grep -q 'pocl_release_dlhandle_cache' "$2" &&
        echo "NOTE: $(basename "$2"): status $1, PoCL's abort in pocl_release_dlhandle_cache (a PoCL defect); running it again"
}

logged() {
    logged_once "$@"
    _lg_rc=$?
    if pocl_aborted $_lg_rc "$2"; then
        logged_once "$@"
        _lg_rc=$?
    fi
    return $_lg_rc
}

train() {
    _tr_name=$1 _tr_n=$2 _tr_dpr=$3
    shift 3
    rm -f "$D/$_tr_name.jsonl"
    logged "$D/$_tr_name.log" "$D/$_tr_name.log" launch "$_tr_n" "$_tr_dpr" "$TRAIN" $ARGS \
        --devices-per-rank "$_tr_dpr" --metrics "$D/$_tr_name.jsonl" "$@"
    _tr_rc=$?
    if [ $_tr_rc -ne 0 ]; then
        fail "$_tr_name: exit status $_tr_rc"; tail -n 5 "$D/$_tr_name.log"; return 1
    fi
    return 0
}

# ref_key args...: what identifies a reference run (printed as one hex word).
ref_key() {
    {
        sha256sum <"$TRAIN"
        printf '%s\n' "$ARGS $*" | sed "s|$D|D|g"
        for _rk_w in $ARGS "$@"; do
            case $_rk_w in "$D"/*) [ -f "$_rk_w" ] && sha256sum <"$_rk_w" ;; esac
        done
    } | sha256sum | cut -c1-32
}

need_ref() {
    _nr_name=${1:-ref}
    [ $# -gt 0 ] && shift
    [ -f "$D/$_nr_name.jsonl" ] && return 0
    _nr_dir=${CT_REF_CACHE:-$(dirname "$TRAIN")/../test-refs}
    _nr_key=$(ref_key "$@")
    if [ -s "$_nr_dir/$_nr_key.jsonl" ]; then
        cp "$_nr_dir/$_nr_key.jsonl" "$D/$_nr_name.jsonl" && cp "$_nr_dir/$_nr_key.log" "$D/$_nr_name.log" &&
            echo "   ($_nr_name: the reference of this build, $_nr_dir/$_nr_key.jsonl)" && return 0
    fi
    train "$_nr_name" 1 1 "$@" || { echo "FAIL: no reference ($_nr_name)"; exit 1; }
    if mkdir -p "$_nr_dir"; then
        cp "$D/$_nr_name.log" "$_nr_dir/$_nr_key.log.$$" && mv -f "$_nr_dir/$_nr_key.log.$$" "$_nr_dir/$_nr_key.log" &&
            cp "$D/$_nr_name.jsonl" "$_nr_dir/$_nr_key.jsonl.$$" &&
            mv -f "$_nr_dir/$_nr_key.jsonl.$$" "$_nr_dir/$_nr_key.jsonl"
    fi
    return 0
}

compare() {
    if $PY - "$1" "$2" "$3" "${4:-0}" "${CMP_NORMS:-0}" "${CMP_ALL_CLIPPED:-0}" <<'EOF'; then :; else fail "$3"; fi
import json, sys
def steps(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if r.get("type") == "train": out[r["step"]] = (r["loss"], r["grad_norm"])
    return out
a, b, what, first = steps(sys.argv[1]), steps(sys.argv[2]), sys.argv[3], int(sys.argv[4])
norms, all_clipped = sys.argv[5] == "1", sys.argv[6] == "1"
keys = [s for s in sorted(a) if s >= first]
if not keys or any(s not in b for s in keys):
    print("   missing steps in", what, sorted(b)); sys.exit(1)
wl = max(abs(a[s][0] - b[s][0]) / abs(a[s][0]) for s in keys)
wn = max(abs(a[s][1] - b[s][1]) / abs(a[s][1]) for s in keys) if norms else 0
clipped = sum(1 for s in keys if a[s][1] > 0.3)
ok = wl <= 1e-5 and (not norms or wn <= 1e-5) and (not all_clipped or clipped == len(keys))
print("%s %-44s %d steps, worst relative difference: loss %.2e%s; %d steps clipped, "
      "loss %.6f -> %.6f" % ("ok:" if ok else "  ", what, len(keys), wl,
      ", norm %.2e" % wn if norms else "", clipped, b[keys[0]][0], b[keys[-1]][0]))
sys.exit(0 if ok else 1)
EOF
}

expect_refusal() {
    _er_none=""
    if [ "$1" = --no-output ]; then _er_none=$2; shift 2; fi
    _er_what=$1 _er_msg=$2
    shift 2
    "$@" >"$D/stdout" 2>"$D/stderr"
    _er_rc=$?
    if [ $_er_rc -ne 2 ]; then
        fail "$_er_what: exit status $_er_rc, expected 2"; cat "$D/stderr"; return 1
    fi
    if ! grep -qF -- "$_er_msg" "$D/stderr"; then
        fail "$_er_what: message lacks '$_er_msg'"; cat "$D/stderr"; return 1
    fi
    if [ -n "$_er_none" ] && [ -s "$_er_none" ]; then
        fail "$_er_what: $_er_none written (work started)"; return 1
    fi
    echo "ok: refused $_er_what (status 2): $(grep -F -- "$_er_msg" "$D/stderr" | head -n 1 | cut -c1-150)"
}

refused() {
    _rf_what=$1 _rf_msg=$2 _rf_n=$3 _rf_pocl=$4
    shift 4
    rm -f "$D/bad.jsonl"
    expect_refusal --no-output "$D/bad.jsonl" "$_rf_what" "$_rf_msg" launch "$_rf_n" "$_rf_pocl" \
        "$TRAIN" $ARGS --metrics "$D/bad.jsonl" "$@"
}

finish() {
    _fi_name="$(basename "$0" .sh)${PART:+ $PART}"
    if [ "${PART:-all}" != all ] && [ "$parts_ran" -eq 0 ]; then
        echo "$_fi_name: no part of $(basename "$0") is named '$PART': nothing ran"; exit 1
    fi
    if [ "$fails" -ne 0 ]; then echo "$_fi_name: $fails failure(s)"; exit 1; fi
    echo "$_fi_name: all passed"
    exit 0
}
