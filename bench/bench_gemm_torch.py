#!/usr/bin/env python3
"""bench_gemm_torch.py - bench_gemm's rows beside torch.matmul on the same shapes, same machine.

    bench_gemm --csv --paths clblast,portable,mma > gemm.csv
    python3 bench/bench_gemm_torch.py --csv gemm.csv --device cuda [--reps 20]

For every distinct shape of the CSV (m, n, k, batch, ta, tb: C = op(A) op(B), row-major, as
bench_gemm states them) it times torch.matmul in fp32 (TF32 off: a true fp32 product, as CLBlast's
SGEMM is) and in bf16 (bf16 operands, PyTorch's own accumulation: fp32 on NVIDIA's tensor cores),
the median of --reps timed calls after 3 untimed ones, the device synchronised around each.
Then one line per CSV row: our path's GFLOP/s, torch's in the same precision (fp32 for the CLBlast
row, bf16 for the bf16 paths), and the ratio ours / torch. A geometric mean per path ends the
table. Run it on the machine bench_gemm ran on: a ratio between two machines means nothing.
"""
import argparse
import csv
import math
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", required=True, help="bench_gemm --csv output ('-': stdin)")
    ap.add_argument("--device", default="cpu", help="torch device: cuda, cuda:1, cpu")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_gemm_torch: python3 has no torch")
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"bench_gemm_torch: torch has no CUDA device here (asked: {a.device})")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    src = sys.stdin if a.csv == "-" else open(a.csv)
    rows = [r for r in csv.DictReader(line for line in src if not line.startswith("#"))]
    if not rows:
        sys.exit(f"bench_gemm_torch: no rows in {a.csv} (bench_gemm --csv writes them)")

    def operands(m, n, k, batch, ta, tb, dtype):
        g = torch.Generator(device="cpu").manual_seed(1234)
        A = torch.randn(batch, k, m, generator=g) if ta else torch.randn(batch, m, k, generator=g)
        B = torch.randn(batch, n, k, generator=g) if tb else torch.randn(batch, k, n, generator=g)
        A, B = A.to(dev, dtype), B.to(dev, dtype)
        return (A.transpose(-1, -2) if ta else A), (B.transpose(-1, -2) if tb else B)

    def gflops(m, n, k, batch, ta, tb, dtype):
        A, B = operands(m, n, k, batch, ta, tb, dtype)
        for _ in range(3):
            torch.matmul(A, B)
        sync()
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            torch.matmul(A, B)
            sync()
            times.append(time.perf_counter() - t0)
        return 2.0 * m * n * k * batch / statistics.median(times) / 1e9

    cache = {}
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"# torch {torch.__version__} on {a.device} ({name}); fp32 with TF32 off, bf16 as torch "
          f"computes it; median of {a.reps}")
    print("shape,path,m,n,k,batch,ta,tb,ours_gflops,torch_gflops,torch_dtype,ratio")
    logs = {}
    for r in rows:
        shape, _, path = r["shape"].partition(":")
        path = path or "clblast"
        m, n, k, batch = (int(r[x]) for x in ("m", "n", "k", "batch"))
        ta, tb = int(r["ta"]), int(r["tb"])
        tf32 = path.startswith("mma-tf32")
        dt = torch.float32 if path == "clblast" or tf32 else torch.bfloat16
        key = (m, n, k, batch, ta, tb, dt, tf32)
        if key not in cache:
            if dev.type == "cuda":  # a tf32 row against torch's TF32 matmul (allow_tf32)
                torch.backends.cuda.matmul.allow_tf32 = tf32
            cache[key] = gflops(m, n, k, batch, ta, tb, dt)
        ours, theirs = float(r["gflops"]), cache[key]
        ratio = ours / theirs if theirs > 0 else float("nan")
        if ours > 0 and theirs > 0:
            logs.setdefault(path, []).append(math.log(ratio))
        print(f"{shape},{path},{m},{n},{k},{batch},{ta},{tb},{ours:.2f},{theirs:.2f},"
              f"{'tf32' if tf32 else 'fp32' if dt == torch.float32 else 'bf16'},{ratio:.3f}")
    for path, v in logs.items():
        print(f"# {path}: geometric mean of ours / torch over {len(v)} shapes: "
              f"{math.exp(sum(v) / len(v)):.3f}")


if __name__ == "__main__":
    main()
