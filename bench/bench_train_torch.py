#!/usr/bin/python3
"""bench_train_torch.py - the PyTorch (CPU) side of bench_train: the same GPT-2 configurations,
the same step (zero_grad + forward + loss + backward + clip_grad_norm_(1.0) + AdamW with decay
0.1 on 2-D weights), the same thread count, reported the same way (tokens/s, TFLOP/s, MFU).

    /usr/bin/python3 bench/bench_train_torch.py [--config tiny|124m|all] [--steps 5]
        [--warmup 2] [--threads 2] [--peak-tflops X] [--profile-steps 0]
        [--precision fp32|bf16] [--seq T] [--batch B]

Model: GPT-2 as in llm.c's train_gpt2.py (pre-LN blocks, fused QKV, tanh GELU, tied
embeddings, vocabulary padded to Vp with the loss over the real V). Attention uses
F.scaled_dot_product_attention(is_causal=True) where torch has it (2.x), else (Debian 12's 1.13)
the explicit masked softmax, as llm.c's script does without flash attention. `--device cuda`
runs the same step on the machine's NVIDIA GPU in fp32 with TF32 off (matmul and cuDNN), timed to
a torch.cuda.synchronize(), so an OpenCL GPU run can be compared on the same card.
`--precision bf16` runs forward and loss under torch.autocast(dtype=torch.bfloat16) (fp32 master
weights, gradients and AdamW state; the matmuls in bf16 on the tensor cores): the PyTorch side
of `bench_train --precision bf16`. --seq and --batch override the configuration's T and B. FLOPs per token:
6 N + 12 L C T, as ct_train_flops_per_token. The peak for MFU defaults to torch's own SGEMM rate
at 1024^3 (best of 4), so MFU is relative to what this CPU does under PyTorch. Prints one line
"JSON {...}" per configuration.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(L=4, C=256, NH=4, T=256, B=4),
    "124m": dict(L=12, C=768, NH=12, T=64, B=4),
}
V, VP, MAXT = 50257, 50304, 1024


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (Debian 12 ships 1.13): the explicit masked softmax
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.attproj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH):
        super().__init__()
        self.wte = nn.Embedding(VP, C)
        self.wpe = nn.Embedding(MAXT, C)
        self.blocks = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if ("attproj" in n or "fcproj" in n) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def gemm_tflops(dev):
    n = 4096 if dev.type == "cuda" else 1024
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    best = 0.0
    for _ in range(6):
        sync(dev)
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync(dev)
        best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e12)
    return best


def run(name, cfg, args, peak, peak_src):
    torch.manual_seed(1337)
    L, C, NH, T, B = cfg["L"], cfg["C"], cfg["NH"], cfg["T"], cfg["B"]
    T, B = args.seq or T, args.batch or B
    dev = torch.device(args.device)
    model = GPT(L, C, NH).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(42)
    data = torch.randint(0, V, (B * T + 1,), generator=g)
    x, y = data[:-1].view(B, T).to(dev), data[1:].view(B, T).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                            enabled=args.precision == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        out = loss.item()  # a device sync on cuda
        sync(dev)
        return out

    first = None
    for _ in range(args.warmup):
        loss = step()
        first = loss if first is None else first
    best = float("inf")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        ts = time.perf_counter()
        loss = step()
        best = min(best, time.perf_counter() - ts)
        first = loss if first is None else first
    el = time.perf_counter() - t0
    ms, tps = 1e3 * el / args.steps, B * T * args.steps / el
    best_ms, best_tps = 1e3 * best, B * T / best
    fpt = 6.0 * nparams + 12.0 * L * C * T
    tflops = fpt * tps / 1e12
    mfu = tflops / peak if peak > 0 else 0.0
    best_mfu = fpt * best_tps / 1e12 / peak if peak > 0 else 0.0
    print(f"\n== {name}: L={L} C={C} NH={NH} T={T} B={B} V={V} Vp={VP}, {nparams/1e6:.2f}M parameters, "
          f"precision {args.precision}")
    print(f"{args.steps} steps after {args.warmup} warm-up: {ms:.1f} ms/step (best {best_ms:.1f}), "
          f"{tps:.0f} tokens/s (best {best_tps:.0f}), {tflops:.3f} TFLOP/s, MFU {100*mfu:.1f}% "
          f"(best {100*best_mfu:.1f}%) of {peak:.3f} TFLOP/s ({peak_src}); "
          f"loss {first:.4f} -> {loss:.4f}")
    print("JSON " + json.dumps(dict(config=name, impl="torch", ms_per_step=round(ms, 2),
                                    best_ms_per_step=round(best_ms, 2),
                                    tokens_per_s=round(tps, 1), best_tokens_per_s=round(best_tps, 1),
                                    tflops=round(tflops, 4), mfu=round(mfu, 4),
                                    best_mfu=round(best_mfu, 4), peak_tflops=round(peak, 4),
                                    steps=args.steps, threads=torch.get_num_threads(),
                                    device=args.device, precision=args.precision, T=T, B=B)))
    if args.profile_steps > 0:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.profile_steps):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="all", choices=["tiny", "124m", "all"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--profile-steps", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (fp32, TF32 off)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: forward and loss under bf16 autocast")
    ap.add_argument("--seq", type=int, default=0, help="T (0: the configuration's)")
    ap.add_argument("--batch", type=int, default=0, help="B (0: the configuration's)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    where = f"{torch.get_num_threads()} threads"
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        where = f"{torch.cuda.get_device_name(dev)}, fp32, TF32 off"
    print(f"torch {torch.__version__}, {where}")
    peak, src = args.peak_tflops, "--peak-tflops"
    if peak <= 0:
        n = 4096 if dev.type == "cuda" else 1024
        peak, src = gemm_tflops(dev), f"measured torch SGEMM {n}^3"
    print(f"peak: {peak:.3f} TFLOP/s ({src})")
    for name, cfg in CONFIGS.items():
        if args.config in ("all", name):
            run(name, cfg, args, peak, src)


if __name__ == "__main__":
    main()
