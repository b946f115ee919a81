#!/usr/bin/python3
"""torch_llama_ref.py - the PyTorch oracle for cltrain's Llama model (Debian's /usr/bin/python3).

The model is Hugging Face's LlamaForCausalLM as the issue states it, written out with plain
tensor ops (no transformers package, no nn.Module): x = embed[idx]; per layer h = RMSNorm(x) with
the input norm's weight (statistics over the channels, eps from the file), q = h Wq^T (NH heads),
k = h Wk^T and v = h Wv^T (NKV heads), the rotary embedding on q and k in Hugging Face's
convention (inv_freq_i = theta^(-2i/hd), cos and sin repeated over both halves, q' = q cos +
rotate_half(q) sin, rotate_half(x) = (-x[hd/2:], x[:hd/2])), causal attention where query head j
reads kv head j // (NH/NKV), scale 1/sqrt(hd); x += o_proj(y); h = RMSNorm(x) with the
post-attention weight; x += down(silu(gate(h)) * up(h)); the final RMSNorm, lm_head (or the
embedding when tied), mean cross-entropy over the real vocabulary V.

With experts (cltrain's file, metadata experts E > 0, top_k K) every block's MLP is E SwiGLU
experts (gate, up, down each, no biases) routed as cltrain's GPT-2 experts are (torch_gpt2_ref.py,
engine/model/ct_engine_moe.h): a softmax router, the K most probable per token (equal p: the lower
expert), a per-row capacity min(T, ceil(F K T / E)) filled rank 0 choices in t order first, y =
sum over kept choices of gate * expert(h); the objective adds alpha times the auxiliary loss
(the mean over rows of E sum_e f_e P_e), summed over the blocks (--capacity-factor F,
--aux-loss alpha). The losses written are the cross-entropy's.

It reads either cltrain's safetensors file of a Llama model (json + numpy: metadata "arch" llama;
the table's tensors, q|k|v stacked in qkvw, [gate; up] in fcw) or a Hugging Face Llama directory
(config.json + model.safetensors with LlamaForCausalLM's names), and with --make-hf DIR writes
such a directory of its own (a seeded init, norm weights perturbed away from 1) first.

Batch file: int32 B, int32 T, B*T input ids, B*T target ids (int32).
Output (little-endian): 16 int64 [0] magic 20241121 [1] version 1 [2] B [3] T [4] Vp [5] nparams
[6] K [7] V, the rest 0; then float64: logits (B*T*Vp), loss, grads (cltrain's table order:
wte, ln1w, qkvw, attprojw, ln2w, routerw, fcw, fcprojw, lnfw, lmhead), K step losses, 0.

AdamW as torch.optim.AdamW (bias correction), weight decay on the 2-D weights only, clipping with
torch.nn.utils.clip_grad_norm_ (0 = off); loss k is measured before update k.
"""
import argparse
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.stderr.write("torch_llama_ref.py: PyTorch is not installed for %s (Debian: apt-get "
                     "install python3-torch)\n" % sys.executable)
    sys.exit(3)

OUT_MAGIC = 20241121
# cltrain's table order of a Llama model's tensors (zero-element rows left out)
NAMES = ["wte", "ln1w", "qkvw", "attprojw", "ln2w", "routerw", "fcw", "fcprojw", "lnfw",
         "lmhead"]
DECAY = {"wte", "qkvw", "attprojw", "routerw", "fcw", "fcprojw", "lmhead"}


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    out = {}
    for name, t in head.items():
        if t["dtype"] != "F32":
            raise SystemExit("%s: tensor %s is %s (F32 only here)" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        arr = np.frombuffer(raw, dtype="<f4", count=(b - a) // 4, offset=8 + n + a)
        out[name] = torch.from_numpy(arr.copy()).view(*t["shape"])
    return meta, out


def write_st(path, tensors):
    head, blobs, at = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        head[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(head).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


class Cfg:
    pass


def from_cltrain(path):
    """cltrain's safetensors: the table's stacked tensors split into Hugging Face's."""
    meta, t = read_st(path)
    if meta.get("arch") != "llama":
        raise SystemExit("%s: not a Llama model (metadata arch %r)" % (path, meta.get("arch")))
    c = Cfg()
    c.V, c.Vp, c.L = int(meta["vocab"]), int(meta["padded_vocab"]), int(meta["layers"])
    c.NH, c.C, c.NKV = int(meta["heads"]), int(meta["channels"]), int(meta["kv_heads"])
    c.F, c.theta, c.eps = int(meta["ffn_dim"]), float(meta["rope_theta"]), float(meta["norm_eps"])
    c.tied = int(meta["tie_embeddings"])
    c.E, c.K = int(meta.get("experts", 0)), int(meta.get("top_k", 0))
    P = [t[n] for n in NAMES if n in t]
    if c.E:  # (L, E, rows, cols) per expert tensor, (L, E, C) the router
        i = NAMES.index
        P[i("routerw")] = P[i("routerw")].reshape(c.L, c.E, c.C)
        P[i("fcw")] = P[i("fcw")].reshape(c.L, c.E, 2 * c.F, c.C)
        P[i("fcprojw")] = P[i("fcprojw")].reshape(c.L, c.E, c.C, c.F)
    return c, P


def from_hf(d):
    """A Hugging Face Llama directory, stacked into cltrain's table order (rows padded to Vp)."""
    with open(os.path.join(d, "config.json")) as f:
        j = json.load(f)
    _, t = read_st(os.path.join(d, "model.safetensors"))
    c = Cfg()
    c.V, c.L, c.NH, c.C = j["vocab_size"], j["num_hidden_layers"], j["num_attention_heads"], \
        j["hidden_size"]
    c.NKV, c.F = j.get("num_key_value_heads", c.NH), j["intermediate_size"]
    c.theta, c.eps = float(j.get("rope_theta", 10000.0)), float(j.get("rms_norm_eps", 1e-6))
    c.tied = 1 if j.get("tie_word_embeddings", False) else 0
    c.Vp = (c.V + 127) // 128 * 128
    c.E = c.K = 0

    def pad(w):
        return torch.cat([w, torch.zeros(c.Vp - c.V, c.C)]) if c.Vp > c.V else w

    L = range(c.L)
    lay = "model.layers.%d."
    P = [pad(t["model.embed_tokens.weight"]),
         torch.stack([t[lay % l + "input_layernorm.weight"] for l in L]),
         torch.stack([torch.cat([t[lay % l + "self_attn.%s_proj.weight" % x] for x in "qkv"])
                      for l in L]),
         torch.stack([t[lay % l + "self_attn.o_proj.weight"] for l in L]),
         torch.stack([t[lay % l + "post_attention_layernorm.weight"] for l in L]),
         torch.stack([torch.cat([t[lay % l + "mlp.gate_proj.weight"],
                                 t[lay % l + "mlp.up_proj.weight"]]) for l in L]),
         torch.stack([t[lay % l + "mlp.down_proj.weight"] for l in L]),
         t["model.norm.weight"]]
    if not c.tied:
        P.append(pad(t["lm_head.weight"]))
    return c, P


def make_hf(d, V, L, NH, NKV, C, F, theta, eps, tied, seed):
    g = torch.Generator().manual_seed(seed)
    hd = C // NH

    def n(*s, std=0.02):
        return torch.randn(*s, generator=g, dtype=torch.float64) * std

    def ones(k):  # norm weights away from 1, so their gradients matter
        return 1.0 + 0.2 * (torch.rand(k, generator=g, dtype=torch.float64) - 0.5)

    t = {"model.embed_tokens.weight": n(V, C, std=0.5)}
    for l in range(L):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = ones(C)
        t[p + "self_attn.q_proj.weight"] = n(C, C, std=0.3)
        t[p + "self_attn.k_proj.weight"] = n(NKV * hd, C, std=0.3)
        t[p + "self_attn.v_proj.weight"] = n(NKV * hd, C, std=0.3)
        t[p + "self_attn.o_proj.weight"] = n(C, C, std=0.2)
        t[p + "post_attention_layernorm.weight"] = ones(C)
        t[p + "mlp.gate_proj.weight"] = n(F, C, std=0.3)
        t[p + "mlp.up_proj.weight"] = n(F, C, std=0.3)
        t[p + "mlp.down_proj.weight"] = n(C, F, std=0.2)
    t["model.norm.weight"] = ones(C)
    if not tied:
        t["lm_head.weight"] = n(V, C, std=0.3)
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
           "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
           "num_attention_heads": NH, "num_key_value_heads": NKV, "hidden_act": "silu",
           "max_position_embeddings": 64, "rms_norm_eps": eps, "rope_theta": theta,
           "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
           "tie_word_embeddings": bool(tied), "torch_dtype": "float32"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_st(os.path.join(d, "model.safetensors"), t)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):  # x (B, nh, T, hd)
    T, hd = x.shape[2], x.shape[3]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    rot = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos + rot * sin


def moe(x, wr, fcw, dw, E, K, F, Fd):
    """SwiGLU experts on h (B, T, C): (y, aux). Selection, capacity and the counts f are
    decisions (no gradient); the gates p and the mean probabilities P carry gradients."""
    B, T, C = x.shape
    p = (x @ wr.t()).softmax(-1)
    order = torch.sort(p.detach(), dim=-1, descending=True, stable=True).indices[..., :K]
    gate = torch.gather(p, -1, order)
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
    for e in range(E):
        w = (gate * ((order == e) & keep).to(x.dtype)).sum(-1, keepdim=True)
        g, u = x @ fcw[e][:Fd].t(), x @ fcw[e][Fd:].t()
        y = y + w * ((torch.nn.functional.silu(g) * u) @ dw[e].t())
    f = routed / (K * T)
    return y, (E * (f * p.mean(dim=1)).sum(-1)).mean()


def forward(c, P, idx, tgt, capf=1.25):
    """(logits, the cross-entropy, the auxiliary loss summed over the blocks)."""
    if c.E:
        wte, n1, qkvw, ow, n2, wr, fcw, dw, nf = P[:9]
        head = wte if c.tied else P[9]
    else:
        wte, n1, qkvw, ow, n2, fcw, dw, nf = P[:8]
        head = wte if c.tied else P[8]
    aux = torch.zeros((), dtype=wte.dtype)
    B, T = idx.shape
    C, NH, NKV, F = c.C, c.NH, c.NKV, c.F
    hd = C // NH
    x = wte[idx]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(c.L):
        h = rmsnorm(x, n1[l], c.eps)
        wq, wk, wv = qkvw[l][:C], qkvw[l][C:C + NKV * hd], qkvw[l][C + NKV * hd:]
        q = (h @ wq.t()).view(B, T, NH, hd).transpose(1, 2)
        k = (h @ wk.t()).view(B, T, NKV, hd).transpose(1, 2)
        v = (h @ wv.t()).view(B, T, NKV, hd).transpose(1, 2)
        q, k = rope(q, c.theta), rope(k, c.theta)
        k = k.repeat_interleave(NH // NKV, dim=1)  # query head j reads kv head j // (NH/NKV)
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ ow[l].t()
        h = rmsnorm(x, n2[l], c.eps)
        if c.E:
            y, a = moe(h, wr[l], fcw[l], dw[l], c.E, c.K, capf, F)
            x, aux = x + y, aux + a
            continue
        g, u = h @ fcw[l][:F].t(), h @ fcw[l][F:].t()
        x = x + (torch.nn.functional.silu(g) * u) @ dw[l].t()
    x = rmsnorm(x, nf, c.eps)
    logits = x @ head.t()
    loss = torch.nn.functional.cross_entropy(logits[..., :c.V].reshape(-1, c.V), tgt.reshape(-1))
    return logits, loss, aux


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="cltrain Llama safetensors file, or a Hugging Face directory/")
    ap.add_argument("--batch")
    ap.add_argument("--out")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--grad-clip", type=float, default=0.0)
    ap.add_argument("--make-hf", help="write a Hugging Face Llama directory here first")
    ap.add_argument("--config", help="V,L,NH,NKV,C,F,theta,eps,tied for --make-hf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--capacity-factor", type=float, default=1.25)
    ap.add_argument("--aux-loss", type=float, default=0.01)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.make_hf:
        f = a.config.split(",")
        make_hf(a.make_hf, *[int(x) for x in f[:6]], float(f[6]), float(f[7]), int(f[8]), a.seed)
        if not a.model:
            return
    c, P = from_hf(a.model) if os.path.isdir(a.model) else from_cltrain(a.model)
    P = [p.to(torch.float64).requires_grad_(True) for p in P]
    with open(a.batch, "rb") as f:
        raw = f.read()
    B, T = struct.unpack("<2i", raw[:8])
    ids = torch.frombuffer(bytearray(raw[8:]), dtype=torch.int32).long()
    idx, tgt = ids[:B * T].view(B, T), ids[B * T:].view(B, T)

    logits, loss, aux = forward(c, P, idx, tgt, a.capacity_factor)
    (loss + a.aux_loss * aux).backward()
    logits0, loss0 = logits.detach().clone(), loss.item()
    grads0 = [p.grad.detach().clone() for p in P]
    for p in P:
        p.grad = None
    names = [n for n in NAMES if c.E or n != "routerw"][:len(P)]
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in zip(names, P) if n in DECAY], "weight_decay": a.weight_decay},
         {"params": [p for n, p in zip(names, P) if n not in DECAY], "weight_decay": 0.0}],
        lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    losses = []
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        _, l, x = forward(c, P, idx, tgt, a.capacity_factor)
        (l + a.aux_loss * x).backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(P, a.grad_clip)
        opt.step()
        losses.append(l.item())
    n = sum(p.numel() for p in P)
    with open(a.out + ".tmp", "wb") as f:
        f.write(struct.pack("<16q", OUT_MAGIC, 1, B, T, c.Vp, n, a.steps, c.V,
                            0, 0, 0, 0, 0, 0, 0, 0))
        f.write(logits0.to(torch.float64).contiguous().numpy().tobytes())
        f.write(struct.pack("<d", loss0))
        for g in grads0:
            f.write(g.to(torch.float64).contiguous().numpy().tobytes())
        f.write(struct.pack("<%dd" % len(losses), *losses))
        f.write(struct.pack("<d", 0.0))
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
