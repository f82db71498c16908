#!/usr/bin/python3
"""Naive PyTorch reference for `horizon bench attention`: materialised softmax(QK^T/sqrt(D) + mask) V,
forward + backward, f32, on this machine's CPU. One length per process so that the peak RSS
(ru_maxrss) belongs to that length. Prints one JSON line per mask."""
import argparse, json, math, resource, time

import torch


def scope_windows(H, T):
    g = T ** (1.0 / H)
    out = []
    for h in range(1, H + 1):
        v = g ** h
        r = round(v)
        out.append(min(T, int(r) if abs(v - r) <= 1e-9 * max(1.0, r) else math.ceil(v)))
    return out


def mask_for(kind, H, T, W):
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    t = i - j
    wins = {"causal": [0] * H, "swa": [min(W, T)] * H, "scope": scope_windows(H, T)}[kind]
    m = torch.empty(H, T, T)
    for h, w in enumerate(wins):
        vis = (t >= 0) & ((t < w) if w > 0 else torch.ones_like(t, dtype=torch.bool))
        m[h] = torch.where(vis, 0.0, float("-inf"))
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--masks", default="causal,swa,scope")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    B, H, T, D = a.B, a.H, a.T, a.D
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    k = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    v = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    gout = torch.randn(B, H, T, D, generator=g)
    for kind in a.masks.split(","):
        mask = mask_for(kind, H, T, a.window)
        fwd, tot = [], []
        for _ in range(a.reps):
            for x in (q, k, v):
                x.grad = None
            t0 = time.perf_counter()
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D) + mask
            o = torch.matmul(torch.softmax(s, dim=-1), v)
            t1 = time.perf_counter()
            o.backward(gout)
            t2 = time.perf_counter()
            fwd.append((t1 - t0) * 1e3)
            tot.append((t2 - t0) * 1e3)
            del s, o
        fwd.sort()
        tot.sort()
        print(json.dumps({"impl": "torch", "T": T, "mask": kind, "fwd_ms": fwd[len(fwd) // 2],
                          "fwd_bwd_ms": tot[len(tot) // 2],
                          "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                          "torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)


if __name__ == "__main__":
    main()
