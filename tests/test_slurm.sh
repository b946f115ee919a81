#!/bin/sh
# test_slurm.sh TRAIN_GPT MPIEXEC SCRIPTS_DIR - train_gpt launched by a real Slurm on this machine
# (issue 31 item 5). The test starts its own one-node cluster (munged, slurmctld, slurmd from
# Debian, installed when missing, with a private configuration, state and ports under a scratch
# folder) and stops it at the end:
#   - `srun --mpi=pmi2 -n 2 train_gpt --dp 2` trains bitwise as `mpiexec -n 2` does (every
#     "train" record's loss, gradient norm and learning rate equal), and within 1e-5 of the
#     single device; the start-up's worker lines show both ranks;
#   - `srun --mpi=none -n 2` (tasks that cannot find each other: each is an MPI world of one) is
#     refused with status 2 and a message naming srun's task count and --mpi=pmi2.
# Needs root (daemons, installing): without it, or without the packages, it says so and exits 77.
. "$(dirname "$0")/lib.sh"
TRAIN=$1
MPIEXEC=$2
SCRIPTS=$3
PART=all

if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: $(basename "$0") needs root (it starts slurmctld, slurmd and munged); not root here"
    exit 77
fi
if ! command -v srun >/dev/null || ! command -v slurmctld >/dev/null ||
    ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    bash -c ". '$SCRIPTS/common.sh' && ct_install slurmd slurmctld slurm-client munge" >/dev/null 2>&1
fi
for c in srun sinfo slurmctld slurmd munged; do
    if ! command -v $c >/dev/null; then
        echo "SKIP: $(basename "$0"): $c is missing and could not be installed (slurmd slurmctld slurm-client munge)"
        exit 77
    fi
done

S=$D/slurm
mkdir -p "$S/state" "$S/spool" "$S/log"
chmod 700 "$S"
host=$(hostname -s)
port=$((20000 + $$ % 20000))
# the daemons run in the foreground as this script's children (so it reaps them): stopped by
# their pids, then the scratch folder goes
pids=""
stop() {
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill $pids 2>/dev/null
    for p in $pids; do wait "$p" 2>/dev/null; done
    rm -rf "$D"
}
trap stop EXIT
cat >"$S/slurm.conf" <<EOF
ClusterName=ct$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CryptoType=crypto/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=ct Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$S/slurm.conf"
munged --foreground --socket="$S/munge.sock" --pid-file="$S/munged.pid" --seed-file="$S/munge.seed" \
    --log-file="$S/log/munged.log" --force 2>"$S/log/munged.err" &
pids="$!"
i=0
while [ $i -lt 50 ] && [ ! -S "$S/munge.sock" ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$S/munge.sock" ] || { echo "FAIL: munged did not start: $(cat "$S/log/munged.err")"; exit 1; }
slurmctld -D -f "$SLURM_CONF" 2>"$S/log/slurmctld.err" &
pids="$pids $!"
slurmd -D -f "$SLURM_CONF" -N "$host" 2>"$S/log/slurmd.err" &
pids="$pids $!"
i=0
while [ $i -lt 100 ] && ! sinfo -h -o %t 2>/dev/null | grep -q idle; do sleep 0.2; i=$((i + 1)); done
if ! sinfo -h -o %t | grep -q idle; then
    echo "FAIL: the node never became idle: $(sinfo 2>&1)"; tail -n 5 "$S"/log/*.log; exit 1
fi
echo "ok: a one-node Slurm ($(slurmctld -V)) on $host, controller port $port"

text_file 300
ARGS="--layers 2 --heads 4 --dim 32 --seq 16 --batch 4 --total-batch 128 --steps 10 \
      --lr 3e-3 --warmup 2 --grad-clip 0.3 --text $D/text.txt --sample-len 0 --eval-every 0 \
      --peak-tflops 1 --bucket-mb 0.01"
need_ref
train m2 2 1 --dp 2
# shellcheck disable=SC2086
if logged "$D/s2.log" "$D/s2.log" env POCL_DEVICES=pthread OMP_WAIT_POLICY=passive \
    timeout 120 srun --mpi=pmi2 -n 2 "$TRAIN" $ARGS --devices-per-rank 1 --dp 2 --metrics "$D/s2.jsonl"; then
    compare "$D/ref.jsonl" "$D/s2.jsonl" "srun --mpi=pmi2 -n 2: dp 2"
    $PY - "$D/m2.jsonl" "$D/s2.jsonl" <<'EOF' || fail "srun and mpiexec differ"
import json, sys
def steps(p):
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in map(json.loads, open(p))
            if r.get("type") == "train"]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
same = a == b and len(a) == 10
print("%s srun against mpiexec: %d steps, losses, norms and rates %s" %
      ("ok:" if same else "FAIL:", len(b), "bitwise equal" if same else "differ"))
sys.exit(0 if same else 1)
EOF
    logsays "$D/s2.log" "worker 1: dp 1 tp 0 pp 0 ep 0 | rank 1 thread 0 | host $(hostname)"
else
    fail "srun --mpi=pmi2 -n 2: status $?"; tail -n 8 "$D/s2.log"
fi
# shellcheck disable=SC2086
expect_refusal "srun without a PMI MPICH speaks" "srun started 2 tasks, but MPI sees 1 rank" \
    env POCL_DEVICES=pthread timeout 120 srun --mpi=none -n 2 "$TRAIN" $ARGS --dp 2
finish
