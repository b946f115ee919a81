#!/usr/bin/python3
"""bench_plan.py - the layout planner against measurement: ct_plan ranks every layout of a model
on W workers by predicted step time; every ranked layout is then trained with train_gpt and its
step time measured; the planner's order is compared with the measured one (Spearman's rank
correlation) and its pick with the measured best.

    bench/bench_plan.py --build build --ranks 2 --devices-per-rank 2 --rounds 3 --steps 8 \
        --model "--layers 4 --heads 4 --dim 128 --seq 64 --batch 8 --total-batch 2048" \
        --json out.json --markdown out.md

Measurement on a shared, noisy machine: the layouts are run in rounds, each round in a rotated
order (a load that comes and goes falls on all of them alike), each run's step time is the
median of its steps after the first two (kernel compilation, warm-up), and a layout's figure is
the median over rounds. The planner is run once before the rounds (--calibrations K: K times,
interleaved with the rounds, predictions averaged)."""
import argparse, json, math, os, subprocess, sys, tempfile, time


def spearman(a, b):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0 + 1
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va > 0 and vb > 0 else float("nan")


def launcher(args, prog):
    env = dict(os.environ)
    env["POCL_DEVICES"] = " ".join(["pthread"] * args.devices_per_rank)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    cmd = []
    if args.ranks > 1:
        cmd = [args.mpiexec, "-n", str(args.ranks)]
    return cmd + [os.path.join(args.build, "bin", prog), "--devices-per-rank",
                  str(args.devices_per_rank)], env


def plan(args):
    cmd, env = launcher(args, "ct_plan")
    cmd += args.model.split() + ["--json", "--reps", str(args.reps)] + args.plan_args.split()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("ct_plan failed (%d):\n%s%s" % (out.returncode, out.stdout, out.stderr))
    return json.loads(out.stdout)


def measure(args, flags, tmp):
    cmd, env = launcher(args, "train_gpt")
    met = os.path.join(tmp, "m.jsonl")
    if os.path.exists(met):
        os.remove(met)
    cmd += args.model.split() + flags.split() + [
        "--steps", str(args.steps), "--eval-every", "0", "--sample-len", "0", "--peak-tflops", "1",
        "--metrics", met] + args.train_args.split()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        print("train_gpt %s failed (%d): %s" % (flags, out.returncode, out.stderr[-400:]),
              file=sys.stderr)
        return float("nan")
    ms = [json.loads(l)["ms"] for l in open(met) if '"type":"train"' in l]
    ms = sorted(ms[2:])
    return ms[len(ms) // 2] if ms else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--devices-per-rank", type=int, default=2)
    ap.add_argument("--model", required=True, help="train_gpt's model and batch flags")
    ap.add_argument("--plan-args", default="", help="more ct_plan flags (e.g. --zero 0)")
    ap.add_argument("--train-args", default="", help="more train_gpt flags")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5, help="ct_plan --reps")
    ap.add_argument("--calibrations", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="measure only the first N ranked (0: all)")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args()

    t0 = time.time()
    plans = [plan(args)]
    lay = [l for l in plans[0]["layouts"] if l["fits"]]
    if args.limit > 0:
        lay = lay[:args.limit]
    names = [l["name"] for l in lay]
    meas = {n: [] for n in names}
    pred = {n: [] for n in names}
    for l in lay:
        pred[l["name"]].append(l["step_ms"])
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            if r % 2:
                order.reverse()
            for n in order:
                flags = [l for l in lay if l["name"] == n][0]["flags"]
                ms = measure(args, flags, tmp)
                meas[n].append(ms)
                print("round %d  %-28s measured %9.1f ms  predicted %9.1f ms" %
                      (r + 1, n, ms, pred[n][0]), flush=True)
            if r + 1 < args.calibrations:
                p = plan(args)
                for l in p["layouts"]:
                    if l["name"] in pred:
                        pred[l["name"]].append(l["step_ms"])
    rows = []
    for n in names:
        m = sorted(x for x in meas[n] if x == x)
        rows.append({"name": n, "flags": [l for l in lay if l["name"] == n][0]["flags"],
                     "predicted_ms": sum(pred[n]) / len(pred[n]),
                     "measured_ms": m[len(m) // 2] if m else float("nan"),
                     "measured_all": meas[n]})
    ok = [r for r in rows if r["measured_ms"] == r["measured_ms"]]
    rho = spearman([r["predicted_ms"] for r in ok], [r["measured_ms"] for r in ok])
    best = min(ok, key=lambda r: r["measured_ms"])
    pick = min(ok, key=lambda r: r["predicted_ms"])
    gap = pick["measured_ms"] / best["measured_ms"] - 1
    summary = {"model": args.model, "workers": args.ranks * args.devices_per_rank,
               "ranks": args.ranks, "devices_per_rank": args.devices_per_rank,
               "rounds": args.rounds, "steps": args.steps, "spearman": rho,
               "pick": pick["name"], "pick_measured_ms": pick["measured_ms"],
               "best": best["name"], "best_measured_ms": best["measured_ms"], "pick_gap": gap,
               "seconds": time.time() - t0, "costs": plans[0].get("costs"), "layouts": rows}
    print("Spearman %.3f over %d layouts; pick %s measured %.1f ms, best %s %.1f ms (pick %.1f %% "
          "slower)" % (rho, len(ok), pick["name"], pick["measured_ms"], best["name"],
                       best["measured_ms"], 100 * gap))
    if args.json:
        json.dump(summary, open(args.json, "w"), indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| rank (predicted) | layout | predicted ms | measured ms (median of %d rounds) "
                    "| measured rank |\n| ---: | --- | ---: | ---: | ---: |\n" % args.rounds)
            mr = sorted(ok, key=lambda r: r["measured_ms"])
            for i, r in enumerate(sorted(rows, key=lambda r: r["predicted_ms"])):
                f.write("| %d | %s | %.1f | %.1f | %s |\n" % (
                    i + 1, r["name"], r["predicted_ms"], r["measured_ms"],
                    mr.index(r) + 1 if r in mr else "-"))
            f.write("\nSpearman %.3f; the pick (%s) measured %.1f ms, the measured best (%s) %.1f ms: "
                    "%.1f %%.\n" % (rho, pick["name"], pick["measured_ms"], best["name"],
                                    best["measured_ms"], 100 * gap))


if __name__ == "__main__":
    main()
