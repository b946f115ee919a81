"""hf_gpt2_files.py - the Python side of tests/test_train_files.sh: llm.c GPT-2 files and Hugging
Face GPT2LMHeadModel directories read and written here with json + numpy + torch (no safetensors
or transformers package), so the engine's readers and writers meet an implementation they do not
share code with. bf16 rounding is torch's (tensor.to(torch.bfloat16)).

  prepare D                         from D/m.bin: D/mr.bin (llm.c fp32 file of m's values rounded
                                    to bf16 by torch); Hugging Face directories D/py1 (F32), D/py3
                                    (F32, three shards and an index), D/pyb (BF16, two shards),
                                    D/pyh (F16); D/bad_* (py1 with one config.json field changed)
  check D                           D/m5.bin holds torch's bf16 of D/m.bin; D/hf and D/hfb (the
                                    engine's directories, F32 and BF16) are Hugging Face's layout
                                    of it; D/pyh.bin (the engine's reading of D/pyh) is torch's
                                    f16 of it
"""
import json
import os
import struct
import sys

import numpy as np

torch = None  # imported when first needed (it takes seconds)


def need_torch():
    global torch
    if torch is None:
        import torch as t
        torch = t

ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
BLOCK = [("ln_1.weight", "ln1w", 0), ("ln_1.bias", "ln1b", 0), ("attn.c_attn.weight", "qkvw", 1),
         ("attn.c_attn.bias", "qkvb", 0), ("attn.c_proj.weight", "attprojw", 1),
         ("attn.c_proj.bias", "attprojb", 0), ("ln_2.weight", "ln2w", 0), ("ln_2.bias", "ln2b", 0),
         ("mlp.c_fc.weight", "fcw", 1), ("mlp.c_fc.bias", "fcb", 0),
         ("mlp.c_proj.weight", "fcprojw", 1), ("mlp.c_proj.bias", "fcprojb", 0)]


def read_llmc(path):
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    assert h[0] == 20240326 and h[1] in (3, 5), h[:2]
    maxT, V, L, NH, C, Vp = h[2:8]
    if h[1] == 3:
        flat = np.frombuffer(raw, "<f4", offset=1024)
    else:
        flat = (np.frombuffer(raw, "<u2", offset=1024).astype(np.uint32) << 16).view(np.float32)
    shapes = {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
              "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C),
              "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
              "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,)}
    t, at = {}, 0
    for k in ORDER:
        n = int(np.prod(shapes[k]))
        t[k] = flat[at:at + n].reshape(shapes[k])
        at += n
    assert at == flat.size, (at, flat.size)
    return list(h), t


def write_llmc(path, h, t):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *h))
        for k in ORDER:
            f.write(np.ascontiguousarray(t[k], dtype="<f4").tobytes())


def bf16(a):
    need_torch()
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(torch.bfloat16)


def hf_tensors(h, t):
    """name -> float32 array in Hugging Face's layout (Conv1D weights (in, out))."""
    V, L = h[3], h[4]
    out = {"transformer.wte.weight": t["wte"][:V], "transformer.wpe.weight": t["wpe"]}
    for l in range(L):
        for hf, k, conv in BLOCK:
            a = t[k][l]
            out["transformer.h.%d.%s" % (l, hf)] = a.T if conv else a
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = t["lnfw"], t["lnfb"]
    return out


def encode(a, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "BF16":
        return bf16(a).view(torch.int16).numpy().tobytes()
    need_torch()
    return torch.from_numpy(np.array(a, dtype=np.float32)).half().view(torch.int16).numpy().tobytes()


def write_safetensors(path, items, dtype):
    head, data, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in items:
        b = encode(a, dtype)
        head[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        data.append(b)
        off += len(b)
    js = json.dumps(head).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(data))


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", None)
    out = {}
    for k, v in head.items():
        a, b = v["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if v["dtype"] == "F32":
            x = np.frombuffer(buf, "<f4")
        else:
            assert v["dtype"] == "BF16", v["dtype"]
            x = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        out[k] = (v["dtype"], x.reshape(v["shape"]))
    return meta, out


def config(h):
    return {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
            "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
            "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
            "n_ctx": h[2], "n_embd": h[6], "n_head": h[5], "n_layer": h[4], "n_positions": h[2],
            "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
            "torch_dtype": "float32", "transformers_version": "4.40.0", "use_cache": True,
            "vocab_size": h[3]}


def hfdir(h, t, d, dtype, shards):
    os.makedirs(d, exist_ok=True)
    items = list(hf_tensors(h, t).items())
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), items, dtype)
    else:
        wmap = {}
        for s in range(shards):
            name = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
            part = items[s::shards]
            write_safetensors(os.path.join(d, name), part, dtype)
            wmap.update({k: name for k, _ in part})
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap},
                  open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)
    json.dump(config(h), open(os.path.join(d, "config.json"), "w"), indent=2)


def prepare(d):
    h, t = read_llmc(os.path.join(d, "m.bin"))
    write_llmc(os.path.join(d, "mr.bin"), h, {k: bf16(v).float().numpy() for k, v in t.items()})
    hfdir(h, t, os.path.join(d, "py1"), "F32", 1)
    hfdir(h, t, os.path.join(d, "py3"), "F32", 3)
    hfdir(h, t, os.path.join(d, "pyb"), "BF16", 2)
    hfdir(h, t, os.path.join(d, "pyh"), "F16", 1)
    for name, key, value in [("act", "activation_function", "relu"),
                             ("rope", "rope_scaling", {"type": "linear", "factor": 2.0}),
                             ("shape", "n_positions", h[2] * 2)]:
        b = os.path.join(d, "bad_" + name)
        os.makedirs(b)
        c = config(h)
        c[key] = value
        json.dump(c, open(os.path.join(b, "config.json"), "w"), indent=2)
        os.symlink(os.path.join(d, "py1", "model.safetensors"), os.path.join(b, "model.safetensors"))


def check5(path, h, t):
    raw = open(path, "rb").read()
    h5 = struct.unpack("<256i", raw[:1024])
    want = b"".join(bf16(t[k]).view(torch.int16).numpy().tobytes() for k in ORDER)
    ok = h5[1] == 5 and h5[2:8] == tuple(h[2:8]) and raw[1024:] == want
    print("%s: the version-5 file holds torch's bf16 of every parameter (%d bytes, version %d)"
          % ("ok" if ok else "FAIL", len(raw), h5[1]))
    return ok


def checkhf(d, h, t, dtype):
    meta, got = read_safetensors(os.path.join(d, "model.safetensors"))
    conf = json.load(open(os.path.join(d, "config.json")))
    want = hf_tensors(h, t)
    ok = meta == {"format": "pt"} and sorted(got) == sorted(want)
    ok &= all(conf[k] == v for k, v in config(h).items() if k in
              ("n_embd", "n_head", "n_layer", "n_positions", "vocab_size", "activation_function"))
    bad = []
    for k, w in want.items():
        dt, g = got.get(k, (None, None))
        w = bf16(w).float().numpy() if dtype == "BF16" else w
        if dt != dtype or g.shape != w.shape or g.tobytes() != np.ascontiguousarray(w, "<f4").tobytes():
            bad.append(k)
    ok &= not bad
    print("%s: the engine's %s directory is GPT2LMHeadModel's layout of the llm.c file "
          "(%d tensors, Conv1D transposed)%s" % ("ok" if ok else "FAIL", dtype, len(got),
                                                 "; differ: %s" % bad[:3] if bad else ""))
    return ok


def check_f16(path, m):
    need_torch()
    got = np.fromfile(path, "<f4", offset=1024)
    h = np.fromfile(path, "<i4", count=8)
    V, C, Vp = h[3], h[6], h[7]
    want = torch.from_numpy(m.copy()).half().float().numpy()
    want[V * C:Vp * C] = 0  # wte's padding rows: not in the Hugging Face file
    ok = got.tobytes() == want.tobytes()
    print("%s: the F16 directory reads as torch's f16 of every parameter (%d)"
          % ("ok" if ok else "FAIL", got.size))
    return ok


def main():
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "prepare":
        prepare(d)
    elif cmd == "check":
        h, t = read_llmc(os.path.join(d, "m.bin"))
        m = np.fromfile(os.path.join(d, "m.bin"), "<f4", offset=1024)
        ok = [check5(os.path.join(d, "m5.bin"), h, t),
              checkhf(os.path.join(d, "hf"), h, t, "F32"),
              checkhf(os.path.join(d, "hfb"), h, t, "BF16"),
              check_f16(os.path.join(d, "pyh.bin"), m)]
        sys.exit(0 if all(ok) else 1)
    else:
        sys.exit("unknown command " + cmd)


main()
