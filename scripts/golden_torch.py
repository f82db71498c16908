#!/usr/bin/python3
"""Golden values for the whole model from an independent implementation (PyTorch, float64).

Builds small decoders in PyTorch with the semantics of docs/methods.md / Horizon's nn/ (pre-norm RMSNorm
blocks, bias-free q/k/v/o with GQA, RoPE half-split, causal / sliding-window masks, scale-invariant
logits, SwiGLU / ReLU^2 MLPs, tied or separate head), fills them with seeded random weights, and
writes tests/golden/<name>.json: the config, every weight under Horizon's parameter names, a batch,
the mean cross-entropy, every parameter's gradient norm and a sample of gradient entries and
logits. tests/nn/golden_test.cpp loads the weights into Horizon and must reproduce the values.
Regenerate:  /usr/bin/python3 scripts/golden_torch.py   (needs python3-torch; not part of the test suite)
"""
import json, math, os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")


def rmsnorm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, base):
    D = x.shape[-1]
    inv = base ** (-torch.arange(D // 2, dtype=torch.float64) * 2 / D)
    ang = pos[:, None].double() * inv[None, :]
    c, s = ang.cos(), ang.sin()
    h = D // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def attention(p, l, x, cfg, kind):
    B, T, C = x.shape
    H, Hkv, D = cfg["n_heads"], cfg["n_kv_heads"], C // cfg["n_heads"]
    q = (x @ p[f"layers.{l}.attn.wq.weight"].t()).view(B, T, H, D).transpose(1, 2)
    k = (x @ p[f"layers.{l}.attn.wk.weight"].t()).view(B, T, Hkv, D).transpose(1, 2)
    v = (x @ p[f"layers.{l}.attn.wv.weight"].t()).view(B, T, Hkv, D).transpose(1, 2)
    pos = torch.arange(T)
    if kind["pos"] == "rope":
        q, k = rope(q, pos, kind["rope_base"]), rope(k, pos, kind["rope_base"])
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(D)
    t = (pos[:, None] - pos[None, :]).double()
    if kind["logit"] == "scale_invariant":
        l1 = torch.log1p(t.clamp(min=0) / kind["tau"])
        s = torch.sqrt(2 * l1 + 1) * s - 2 * l1
    visible = t >= 0
    if kind["mask"] == "window":
        visible = visible & (t < kind["window"])
    s = s.masked_fill(~visible, float("-inf"))
    y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, C)
    return y @ p[f"layers.{l}.attn.wo.weight"].t()


def mlp(p, l, x, kind):
    h = x @ p[f"layers.{l}.mlp.w1.weight"].t()
    if kind == "swiglu":
        h = F.silu(h) * (x @ p[f"layers.{l}.mlp.w3.weight"].t())
    else:  # relu2
        h = F.relu(h) ** 2
    return h @ p[f"layers.{l}.mlp.w2.weight"].t()


def forward(p, ids, cfg):
    x = p["embed.weight"][ids]
    for l in range(cfg["n_layers"]):
        kind = cfg["kinds"][cfg["pattern"][l % len(cfg["pattern"])]]
        x = x + attention(p, l, rmsnorm(x, p[f"layers.{l}.norm1.weight"]), cfg, kind)
        x = x + mlp(p, l, rmsnorm(x, p[f"layers.{l}.norm2.weight"]), cfg["mlp"])
    x = rmsnorm(x, p["norm.weight"])
    head = p["embed.weight"] if cfg["tie_embeddings"] else p["head.weight"]
    return x @ head.t()


def shapes(cfg):
    C, H, Hkv, F_ = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"], cfg["mlp_hidden"]
    D = C // H
    s = {"embed.weight": (cfg["vocab_size"], C)}
    for l in range(cfg["n_layers"]):
        s[f"layers.{l}.norm1.weight"] = (C,)
        s[f"layers.{l}.attn.wq.weight"] = (H * D, C)
        s[f"layers.{l}.attn.wk.weight"] = (Hkv * D, C)
        s[f"layers.{l}.attn.wv.weight"] = (Hkv * D, C)
        s[f"layers.{l}.attn.wo.weight"] = (C, H * D)
        s[f"layers.{l}.norm2.weight"] = (C,)
        s[f"layers.{l}.mlp.w1.weight"] = (F_, C)
        if cfg["mlp"] == "swiglu":
            s[f"layers.{l}.mlp.w3.weight"] = (F_, C)
        s[f"layers.{l}.mlp.w2.weight"] = (C, F_)
    s["norm.weight"] = (C,)
    if not cfg["tie_embeddings"]:
        s["head.weight"] = (cfg["vocab_size"], C)
    return s


def make(name, cfg, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    p = {}
    for n, shp in shapes(cfg).items():
        w = torch.randn(*shp, generator=g) * (0.3 if "norm" not in n else 0.2)
        if "norm" in n:
            w = w + 1.0
        p[n] = w.requires_grad_(True)
    ids = torch.randint(0, 256, (B, T + 1), generator=g)
    logits = forward(p, ids[:, :-1], cfg)
    loss = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), ids[:, 1:].reshape(-1))
    loss.backward()
    sample = {}
    for n, w in p.items():
        flat = w.grad.reshape(-1)
        idx = torch.randint(0, flat.numel(), (4,), generator=g)
        sample[n] = [[int(i), float(flat[i])] for i in idx]
    out = {
        "name": name, "config": cfg, "batch": B, "seq_len": T,
        "ids": ids.tolist(),
        "weights": {n: {"shape": list(w.shape), "values": w.detach().reshape(-1).tolist()} for n, w in p.items()},
        "loss": float(loss),
        "grad_norms": {n: float(w.grad.norm()) for n, w in p.items()},
        "grad_samples": sample,
        "logits_sample": [[b, t, v, float(logits[b, t, v])] for b, t, v in [(0, 0, 5), (1, T - 1, 100), (0, T // 2, 258)]],
        "generator": "scripts/golden_torch.py (PyTorch %s, float64)" % torch.__version__,
    }
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(name, "loss", float(loss))


base = {"vocab_size": 259, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "mlp_hidden": 48}
make("rope_gqa_swiglu", dict(base, mlp="swiglu", tie_embeddings=True,
                             kinds={"rope": {"pos": "rope", "rope_base": 10000.0, "mask": "causal", "logit": "identity"}},
                             pattern=["rope"]), B=2, T=12, seed=1)
make("nope_si_swa_relu2", dict(base, mlp="relu2", tie_embeddings=False,
                               kinds={"g": {"pos": "none", "mask": "causal", "logit": "scale_invariant", "tau": 3.0},
                                      "s": {"pos": "rope", "rope_base": 500.0, "mask": "window", "window": 5, "logit": "identity"}},
                               pattern=["g", "s"]), B=2, T=13, seed=2)
