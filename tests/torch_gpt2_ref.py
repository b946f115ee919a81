#!/usr/bin/python3
"""torch_gpt2_ref.py - the PyTorch oracle for cltrain's GPT-2 (run with Debian's /usr/bin/python3).

Reads a model file - llm.c's GPT-2 format (magic 20240326, version 3, fp32) or safetensors (read
here with json + numpy, no safetensors package needed) - and a batch file, computes with PyTorch in
float64 (or float32) the logits, the loss, every parameter gradient, then the losses of K AdamW
steps on the same batch, and writes them to an output file. It can also write an llm.c model file
of its own (--make-model), so cltrain's reader is checked against a file PyTorch wrote.

The model is GPT-2 as llm.c's train_gpt2.py defines it, written out with plain tensor ops from the
flat parameter list in llm.c's order (no nn.Module, so nothing hides a difference). A safetensors
file with experts > 0 holds a mixture-of-experts GPT (cltrain's engine/ct_engine_moe.h): every
block's MLP is E experts, routed per token to the K most probable by a softmax router, with a
per-row capacity (--capacity-factor F) and an auxiliary load-balancing loss (--aux-loss alpha)
added to the objective; the losses written are the cross-entropy alone.

Batch file: int32 B, int32 T, then B*T input ids, then B*T target ids (int32).
Output file (little-endian): 16 int64 header
  [0] magic 20241121  [1] version 1  [2] B  [3] T  [4] Vp  [5] nparams  [6] K  [7] V
  [8] kept choices  [9] choices (the first forward's, summed over the blocks; 0 when dense)
then float64: logits (B*T*Vp), loss (1), grads (nparams, table order; of the cross-entropy plus
alpha times the auxiliary loss), K step losses (the cross-entropy), the first forward's aux.

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
         "routerw", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "routerw", "fcw", "fcprojw"}


def shapes(maxT, V, L, NH, C, Vp, E=0):
    """The table's shapes; a dense model (E = 0) has no router (zero elements)."""
    x = (E,) if E else ()
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, E, C), (L,) + x + (4 * C, C), (L,) + x + (4 * C,),
            (L,) + x + (C, 4 * C), (L,) + x + (C,), (C,), (C,)]


def read_safetensors(path, dtype):
    """A safetensors file by hand: 8-byte little-endian header length, JSON header, raw data."""
    import json
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__")
    if meta.get("format") != "cltrain-gpt":
        raise SystemExit("%s: metadata format %r" % (path, meta.get("format")))
    cfg = tuple(int(meta[k]) for k in ("max_seq", "vocab", "layers", "heads", "channels",
                                        "padded_vocab", "experts", "top_k"))
    shp = shapes(*cfg[:7])
    params = []
    for name, s in zip(NAMES, shp):
        if math.prod(s) == 0:
            params.append(torch.zeros(s, dtype=dtype, requires_grad=True))
            continue
        t = head[name]
        if t["dtype"] != "F32" or tuple(t["shape"]) != s:
            raise SystemExit("%s: tensor %s is %s %s, expected F32 %s" % (path, name, t["dtype"],
                                                                          t["shape"], s))
        a, b = t["data_offsets"]
        arr = np.frombuffer(raw, dtype="<f4", count=(b - a) // 4, offset=8 + n + a).reshape(s)
        params.append(torch.from_numpy(arr.copy()).to(dtype).requires_grad_(True))
    return cfg, params


def read_model(path, dtype):
    """cfg = (maxT, V, L, NH, C, Vp, E, K) and the parameters in table order."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) > 8 and raw[8:9] == b"{":
        return read_safetensors(path, dtype)
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
    return (maxT, V, L, NH, C, Vp, 0, 0), params


def write_model(path, cfg, params):
    maxT, V, L, NH, C, Vp = cfg[:6]
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
        if math.prod(s) == 0:
            out.append(torch.zeros(s))
            continue
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


def moe(x, wr, fcw, fcb, fpw, fpb, E, K, F):
    """The mixture-of-experts MLP of one block: (y, aux). Selection, capacity and the counts f are
    decisions (no gradient); the gates p and the router's mean probabilities P carry gradients."""
    B, T, C = x.shape
    p = (x @ wr.t()).softmax(-1)  # (B, T, E)
    # the K largest p per token, descending; equal p: the lower expert (a stable sort)
    order = torch.sort(p.detach(), dim=-1, descending=True, stable=True).indices[..., :K]
    gate = torch.gather(p, -1, order)  # (B, T, K)
    cap = T if F == 0 else min(T, math.ceil(F * K * T / E))
    keep = torch.zeros(B, T, K, dtype=torch.bool)
    routed = torch.zeros(B, E, dtype=x.dtype)
    for b in range(B):  # per row: rank 0 choices in t order, then rank 1, ...
        cnt = [0] * E
        for k in range(K):
            for t in range(T):
                e = int(order[b, t, k])
                routed[b, e] += 1
                if cnt[e] < cap:
                    keep[b, t, k] = True
                    cnt[e] += 1
    y = torch.zeros_like(x)
    for e in range(E):  # every expert on every token, weighted by its kept gate (0 elsewhere)
        w = (gate * ((order == e) & keep).to(x.dtype)).sum(-1, keepdim=True)
        y = y + w * (gelu(x @ fcw[e].t() + fcb[e]) @ fpw[e].t() + fpb[e])
    f = routed / (K * T)
    aux = (E * (f * p.mean(dim=1)).sum(-1)).mean()
    return y, aux, int(keep.sum()), B * T * K


def forward(cfg, P, idx, tgt, F=1.25, stats=None):
    """(logits, the cross-entropy, the auxiliary loss summed over the blocks)."""
    maxT, V, L, NH, C, Vp, E, K = cfg
    (wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, wr, fcw, fcb, fpw, fpb, lnfw,
     lnfb) = P
    B, T = idx.shape
    hs = C // NH
    aux = torch.zeros((), dtype=wte.dtype)
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
        if E:
            y, a, kept, choices = moe(h, wr[l], fcw[l], fcb[l], fpw[l], fpb[l], E, K, F)
            aux = aux + a
            if stats is not None:
                stats[0] += kept
                stats[1] += choices
            x = x + y
        else:
            x = x + gelu(h @ fcw[l].t() + fcb[l]) @ fpw[l].t() + fpb[l]
    x = layernorm(x, lnfw, lnfb)
    logits = x @ wte.t()  # (B, T, Vp)
    loss = torch.nn.functional.cross_entropy(logits[..., :V].reshape(-1, V), tgt.reshape(-1))
    return logits, loss, aux


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
    ap.add_argument("--capacity-factor", type=float, default=1.25)
    ap.add_argument("--aux-loss", type=float, default=0.01)
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

    stats = [0, 0]
    logits, loss, aux = forward(cfg, P, idx, tgt, a.capacity_factor, stats)
    (loss + a.aux_loss * aux).backward()
    logits0 = logits.detach().clone()
    loss0 = loss.item()
    grads0 = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in P]

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
        _, l, x = forward(cfg, P, idx, tgt, a.capacity_factor)
        (l + a.aux_loss * x).backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(P, a.grad_clip)
        opt.step()
        losses.append(l.item())

    n = sum(p.numel() for p in P)
    with open(a.out + ".tmp", "wb") as f:
        f.write(struct.pack("<16q", OUT_MAGIC, 1, B, T, cfg[5], n, a.steps, cfg[1],
                            stats[0], stats[1], 0, 0, 0, 0, 0, 0))
        f.write(logits0.to(torch.float64).contiguous().numpy().tobytes())
        f.write(struct.pack("<d", loss0))
        for g in grads0:
            f.write(g.to(torch.float64).contiguous().numpy().tobytes())
        f.write(struct.pack("<%dd" % len(losses), *losses))
        f.write(struct.pack("<d", float(aux)))
    import os
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
