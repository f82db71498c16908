#!/usr/bin/env python3
"""PyTorch reference for `horizon bench train`: the same decoder (tied embeddings, pre-norm RMSNorm
blocks, bias-free q/k/v/o, RoPE half-split, causal attention, SwiGLU or GELU MLP), same shapes,
AdamW; tokens/s of full training steps on random tokens, with the time per phase, peak memory and
MFU computed like Horizon's. Prints one JSON line.

  --device cpu|cuda   --dtype fp32|bf16 (torch.autocast, f32 master weights, as Horizon's bf16)
  --attn naive|sdpa   (sdpa = scaled_dot_product_attention: FlashAttention on a GPU)
  --compile           (torch.compile of the model)   --peak TFLOP/s for the MFU (0: none)
  --init gpt2|torch   gpt2 (default): Horizon's initialisation, N(0, 0.02) with the residual
                      projections at 0.02 / sqrt(2 L); torch: PyTorch's module defaults
  --flush-denormal    torch.set_flush_denormal(True) (PyTorch's switch for FTZ/DAZ)
  AdamW is fused (one kernel over all parameters) on the CPU and on CUDA."""
import argparse, json, math, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rope(x, cos, sin):
    # in the activations' dtype (bf16 under autocast), as transformers' Llama does: f32 tables would
    # promote q and k to f32 and charge PyTorch for traffic its users do not pay
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, d, H, hidden, mlp, attn):
        super().__init__()
        self.H, self.D, self.mlp, self.attn = H, d // H, mlp, attn
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False) if mlp == "swiglu" else None
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.n1(x)
        q = self.wq(h).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.wk(h).view(B, T, self.H, self.D).transpose(1, 2)
        v = self.wv(h).view(B, T, self.H, self.D).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = q @ k.transpose(-1, -2) / math.sqrt(self.D) + mask
            y = torch.softmax(s.float(), -1).to(v.dtype) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        h = self.n2(x)
        if self.mlp == "swiglu":
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x + self.w2(F.gelu(self.w1(h)))


class Model(nn.Module):
    def __init__(self, V, d, L, H, hidden, mlp="swiglu", attn="naive"):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.blocks = nn.ModuleList(Block(d, H, hidden, mlp, attn) for _ in range(L))
        self.norm = RMSNorm(d)

    def forward(self, ids, cos, sin, mask):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return self.norm(x) @ self.emb.weight.t()


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(V=259, d=128, L=4, H=4, hidden=344, T=256, B=8, steps=20, warmup=3, threads=2).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--mlp", default="swiglu", choices=["swiglu", "gelu"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--attn", default="naive", choices=["naive", "sdpa"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--init", default="gpt2", choices=["gpt2", "torch"])
    ap.add_argument("--flush-denormal", action="store_true")
    ap.add_argument("--peak", type=float, default=0.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if a.flush_denormal:
        torch.set_flush_denormal(True)
    m = Model(a.V, a.d, a.L, a.H, a.hidden, a.mlp, a.attn)
    if a.init == "gpt2":
        with torch.no_grad():
            for name, p in m.named_parameters():
                if p.dim() == 2:
                    resid = name.endswith("wo.weight") or name.endswith("w2.weight")
                    p.normal_(0.0, 0.02 / math.sqrt(2 * a.L) if resid else 0.02)
    m = m.to(dev)
    step_model = torch.compile(m) if a.compile else m
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            fused=True)
    D = a.d // a.H
    pos = torch.arange(a.T).float()[:, None] * (10000.0 ** (-torch.arange(D // 2).float() * 2 / D))[None, :]
    cos, sin = pos.cos().to(dev), pos.sin().to(dev)
    mask = torch.full((a.T, a.T), float("-inf")).triu(1).to(dev)
    g = torch.Generator().manual_seed(1)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times, fwd, bwd, upd = [], [], [], []
    for i in range(a.warmup + a.steps):
        if i == a.warmup and cuda:
            torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(0, a.V, (a.B, a.T + 1), generator=g).to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = step_model(ids[:, :-1], cos, sin, mask)
            loss = F.cross_entropy(logits.reshape(-1, a.V).float(), ids[:, 1:].reshape(-1))
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t3 = time.perf_counter()
        if i >= a.warmup:
            times.append(t3 - t0), fwd.append(t1 - t0), bwd.append(t2 - t1), upd.append(t3 - t2)
    med = lambda v: sorted(v)[len(v) // 2]
    n_mm = sum(p.numel() for p in m.parameters() if p.dim() == 2)  # tied head: the embedding once
    flops = 6 * n_mm + a.L * 3 * 4 * D * a.H * (a.T + 1) / 2  # causal visible pairs per token
    tps = a.B * a.T / med(times)
    print(json.dumps({"impl": "torch" + ("+compile" if a.compile else "") + ("+sdpa" if a.attn == "sdpa" else ""),
                      "device": a.device, "precision": a.dtype,
                      "init": a.init, "flush_denormal": a.flush_denormal,
                      "params": sum(p.numel() for p in m.parameters()), "step_ms": med(times) * 1e3,
                      "tok_per_s": tps, "forward_ms": med(fwd) * 1e3, "backward_ms": med(bwd) * 1e3,
                      "update_ms": med(upd) * 1e3, "flops_per_token": flops,
                      "mfu": tps * flops / (a.peak * 1e12) if a.peak > 0 else 0.0,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
