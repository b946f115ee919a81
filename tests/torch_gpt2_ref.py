#!/usr/bin/python3
"""torch_gpt2_ref.py - the PyTorch oracle for cltrain's GPT-2 (run with Debian's /usr/bin/python3).

Reads an llm.c GPT-2 model file (magic 20240326, version 3, fp32) and a batch file, computes with
PyTorch in float64 (or float32) the logits, the loss, every parameter gradient, then the losses of
K AdamW steps on the same batch, and writes them to an output file. It can also write an llm.c
model file of its own (--make-model), so cltrain's reader is checked against a file PyTorch wrote.

The model is GPT-2 as llm.c's train_gpt2.py defines it, written out with plain tensor ops from the
flat parameter list in llm.c's order (no nn.Module, so nothing hides a difference).

Batch file: int32 B, int32 T, then B*T input ids, then B*T target ids (int32).
Output file (little-endian): 16 int64 header
  [0] magic 20241121  [1] version 1  [2] B  [3] T  [4] Vp  [5] nparams  [6] K  [7] V
then float64: logits (B*T*Vp), loss (1), grads (nparams, table order), K step losses.

AdamW as llm.c and torch.optim.AdamW with bias correction: weight decay only on the 2-D weight
matrices (wte, wpe, qkvw, attprojw, fcw, fcprojw), gradient clipping with
torch.nn.utils.clip_grad_norm_ (multiplier clip / (norm + 1e-6) when below 1), clip 0 = off.
"""
import argparse
import math
import struct
import sys

try:
    import torch
except ImportError:
    sys.stderr.write("torch_gpt2_ref.py: PyTorch is not installed for %s (Debian: apt-get install "
                     "python3-torch)\n" % sys.executable)
    sys.exit(3)

MODEL_MAGIC = 20240326
OUT_MAGIC = 20241121

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def shapes(maxT, V, L, NH, C, Vp):
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


def read_model(path, dtype):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 1024:
        raise SystemExit("%s: too short for an llm.c model file" % path)
    h = struct.unpack("<256i", raw[:1024])
    if h[0] != MODEL_MAGIC or h[1] != 3:
        raise SystemExit("%s: bad magic/version %d/%d" % (path, h[0], h[1]))
    maxT, V, L, NH, C, Vp = h[2:8]
    shp = shapes(maxT, V, L, NH, C, Vp)
    n = sum(math.prod(s) for s in shp)
    if len(raw) != 1024 + 4 * n:
        raise SystemExit("%s: size %d, expected %d" % (path, len(raw), 1024 + 4 * n))
    flat = torch.frombuffer(bytearray(raw[1024:]), dtype=torch.float32).to(dtype)
    params, at = [], 0
    for s in shp:
        k = math.prod(s)
        params.append(flat[at:at + k].view(*s).clone().requires_grad_(True))
        at += k
    return (maxT, V, L, NH, C, Vp), params


def write_model(path, cfg, params):
    maxT, V, L, NH, C, Vp = cfg
    h = [0] * 256
    h[0:8] = [MODEL_MAGIC, 3, maxT, V, L, NH, C, Vp]
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<256i", *h))
        for p in params:
            f.write(p.detach().to(torch.float32).contiguous().numpy().tobytes())
    import os
    os.replace(path + ".tmp", path)


def make_model(cfg, seed):
    """GPT-2 initialisation as PyTorch's reference does it (its own generator)."""
    maxT, V, L, NH, C, Vp = cfg
    g = torch.Generator().manual_seed(seed)
    out = []
    for name, s in zip(NAMES, shapes(*cfg)):
        if name in ("ln1w", "ln2w", "lnfw"):
            t = torch.ones(s)
        elif name.endswith("b") and name not in ("wte",):
            t = torch.randn(s, generator=g) * 0.02  # nonzero biases test more of the backward
        else:
            std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
            t = torch.randn(s, generator=g) * std
        if name == "wte":
            t[V:] = 0
        out.append(t)
    return out


def layernorm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, P, idx, tgt):
    maxT, V, L, NH, C, Vp = cfg
    wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = P
    B, T = idx.shape
    hs = C // NH
    x = wte[idx] + wpe[:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = layernorm(x, ln1w[l], ln1b[l])
        qkv = h @ qkvw[l].t() + qkvb[l]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + y @ apw[l].t() + apb[l]
        h = layernorm(x, ln2w[l], ln2b[l])
        x = x + gelu(h @ fcw[l].t() + fcb[l]) @ fpw[l].t() + fpb[l]
    x = layernorm(x, lnfw, lnfb)
    logits = x @ wte.t()  # (B, T, Vp)
    loss = torch.nn.functional.cross_entropy(logits[..., :V].reshape(-1, V), tgt.reshape(-1))
    return logits, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="llm.c model file to read")
    ap.add_argument("--batch", help="batch file (B, T, inputs, targets)")
    ap.add_argument("--out", help="output file")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--grad-clip", type=float, default=0.0)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    ap.add_argument("--make-model", help="write a freshly initialised llm.c model file here")
    ap.add_argument("--config", help="maxT,V,L,NH,C,Vp for --make-model")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)

    if a.make_model:
        cfg = tuple(int(x) for x in a.config.split(","))
        write_model(a.make_model, cfg, make_model(cfg, a.seed))
        if not a.model:
            return

    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    cfg, P = read_model(a.model, dtype)
    with open(a.batch, "rb") as f:
        raw = f.read()
    B, T = struct.unpack("<2i", raw[:8])
    ids = torch.frombuffer(bytearray(raw[8:]), dtype=torch.int32).long()
    if ids.numel() != 2 * B * T:
        raise SystemExit("%s: %d ids, expected %d" % (a.batch, ids.numel(), 2 * B * T))
    idx, tgt = ids[:B * T].view(B, T), ids[B * T:].view(B, T)

    logits, loss = forward(cfg, P, idx, tgt)
    loss.backward()
    logits0 = logits.detach().clone()
    loss0 = loss.item()
    grads0 = [p.grad.detach().clone() for p in P]

    # K AdamW steps on the same batch; loss k is measured before update k.
    for p in P:
        p.grad = None
    decay = [p for n, p in zip(NAMES, P) if n in DECAY]
    other = [p for n, p in zip(NAMES, P) if n not in DECAY]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    losses = []
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        _, l = forward(cfg, P, idx, tgt)
        l.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(P, a.grad_clip)
        opt.step()
        losses.append(l.item())

    n = sum(p.numel() for p in P)
    with open(a.out + ".tmp", "wb") as f:
        f.write(struct.pack("<16q", OUT_MAGIC, 1, B, T, cfg[5], n, a.steps, cfg[1],
                            0, 0, 0, 0, 0, 0, 0, 0))
        f.write(logits0.to(torch.float64).contiguous().numpy().tobytes())
        f.write(struct.pack("<d", loss0))
        for g in grads0:
            f.write(g.to(torch.float64).contiguous().numpy().tobytes())
        f.write(struct.pack("<%dd" % len(losses), *losses))
    import os
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
