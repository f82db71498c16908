#!/usr/bin/python3
"""PyTorch reference for `horizon bench train`: the same decoder (byte vocab 259, tied embeddings,
pre-norm RMSNorm blocks, bias-free q/k/v/o, RoPE half-split, causal softmax attention, SwiGLU MLP),
same shapes, fp32, AdamW; tokens/s of full training steps on random tokens. Prints one JSON line."""
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
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(nn.Module):
    def __init__(self, d, H, hidden):
        super().__init__()
        self.H, self.D = H, d // H
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.n1(x)
        q = self.wq(h).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.wk(h).view(B, T, self.H, self.D).transpose(1, 2)
        v = self.wv(h).view(B, T, self.H, self.D).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.D) + mask
        y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self, V, d, L, H, hidden):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.blocks = nn.ModuleList(Block(d, H, hidden) for _ in range(L))
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
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Model(a.V, a.d, a.L, a.H, a.hidden)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    D = a.d // a.H
    pos = torch.arange(a.T).float()[:, None] * (10000.0 ** (-torch.arange(D // 2).float() * 2 / D))[None, :]
    cos, sin = pos.cos(), pos.sin()
    mask = torch.full((a.T, a.T), float("-inf")).triu(1)
    g = torch.Generator().manual_seed(1)
    times = []
    for i in range(a.warmup + a.steps):
        ids = torch.randint(0, 256, (a.B, a.T + 1), generator=g)
        t0 = time.perf_counter()
        logits = m(ids[:, :-1], cos, sin, mask)
        loss = F.cross_entropy(logits.reshape(-1, a.V), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"impl": "torch", "params": sum(p.numel() for p in m.parameters()),
                      "step_ms": med * 1e3, "tok_per_s": a.B * a.T / med, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
