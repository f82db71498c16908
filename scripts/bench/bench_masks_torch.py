"""PyTorch twin of `horizon bench attention --masks causal,chunkC,swa,sinkS`: forward + backward, f32, on
this machine's CPU, as a PyTorch user would run these masks there: F.scaled_dot_product_attention with
is_causal=True for causal and a boolean (T, T) attn_mask for the others (PyTorch's fused CPU kernel
takes the mask; FlexAttention, which would skip the masked blocks, has no CPU backward in 2.x).
Masks: chunkC = causal inside chunks of C positions (Llama 4); swa = the last W keys; sinkS = swa plus
the first S tokens (StreamingLLM). One JSON line per (T, mask)."""
import argparse, json, time

import torch
import torch.nn.functional as F


def mask_of(kind, T, W):
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    causal = j <= i
    if kind == "causal":
        return None
    if kind.startswith("chunk"):
        C = int(kind[5:])
        return causal & (i // C == j // C)
    swa = causal & (i - j < W)
    if kind == "swa":
        return swa
    if kind.startswith("sink"):
        return swa | (causal & (j < int(kind[4:])))
    raise SystemExit(f"unknown mask {kind}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--masks", default="causal,chunk8192,swa,sink4")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    T, H, D = a.T, a.H, a.D
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, H, T, D, generator=g, requires_grad=True) for _ in range(3))
    gout = torch.randn(1, H, T, D, generator=g)
    for kind in a.masks.split(","):
        m = mask_of(kind, T, a.window)
        tot = []
        for _ in range(a.reps + 1):  # the first is a warm-up
            for x in (q, k, v):
                x.grad = None
            t0 = time.perf_counter()
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=m is None)
            o.backward(gout)
            tot.append((time.perf_counter() - t0) * 1e3)
        tot = sorted(tot[1:])
        print(json.dumps({"impl": "torch", "T": T, "mask": kind, "fwd_bwd_ms": tot[len(tot) // 2],
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
