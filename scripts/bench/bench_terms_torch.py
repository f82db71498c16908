"""PyTorch twin of `horizon bench attention --terms`: causal attention with learned attention sinks
and FoX forget gates, forward + backward, f32, on this machine's CPU, as a PyTorch user would write
them there (FoX's own Triton kernel is GPU-only):
  none      F.scaled_dot_product_attention(is_causal=True), PyTorch's fused CPU path;
  fox       SDPA with a float attn_mask = c_i - c_j (c = cumsum(log f)) and -inf above the diagonal,
            the (B, H, T, T) bias built each step (log f learned: its gradient is part of the step);
  sink      the gpt-oss reference: scores with a sink column, softmax, the column dropped, @ V;
  sink+fox  the same with FoX's bias added to the scores.
One JSON line per (T, terms). Lengths whose (B, H, T, T) tensors exceed --max-gib are skipped."""
import argparse, json, math, time

import torch
import torch.nn.functional as F


def step(terms, q, k, v, z, logf, gout, T, D):
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    bias = None
    if "fox" in terms:
        c = torch.cumsum(logf, dim=-1)                                   # (B, H, T)
        bias = (c.unsqueeze(-1) - c.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
    t0 = time.perf_counter()
    if terms == "none":
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif terms == "fox":
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    else:
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        s = s + bias if bias is not None else s.masked_fill(~causal, float("-inf"))
        zz = z.view(1, -1, 1, 1).expand(s.shape[0], -1, T, 1)
        p = torch.softmax(torch.cat([s, zz], dim=-1), dim=-1)[..., :T]
        o = torch.matmul(p, v)
    t1 = time.perf_counter()
    o.backward(gout)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", default="4096,8192,16384")
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--terms", default="none,sink,fox,sink+fox")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-gib", type=float, default=6.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    B, H, D = a.B, a.H, a.D
    for T in [int(x) for x in a.T.split(",")]:
        g = torch.Generator().manual_seed(1)
        q = torch.randn(B, H, T, D, generator=g, requires_grad=True)
        k = torch.randn(B, H, T, D, generator=g, requires_grad=True)
        v = torch.randn(B, H, T, D, generator=g, requires_grad=True)
        z = torch.zeros(H, requires_grad=True)
        logf = (-0.1 * torch.rand(B, H, T, generator=g)).requires_grad_(True)
        gout = torch.randn(B, H, T, D, generator=g)
        for terms in a.terms.split(","):
            # a materialised (B, H, T, T) f32 tensor, about 4 of them alive in the backward
            need = 4 * B * H * T * T * 4 / 2**30 if terms != "none" else 0
            row = {"impl": "torch", "version": torch.__version__, "T": T, "B": B, "H": H, "D": D, "terms": terms}
            if need > a.max_gib:
                row["skipped"] = f"(B, H, T, T) tensors need ~{need:.0f} GiB"
                print(json.dumps(row), flush=True)
                continue
            fwd, tot = [], []
            for _ in range(a.reps):
                for x in (q, k, v, z, logf):
                    x.grad = None
                f, t = step(terms, q, k, v, z, logf, gout, T, D)
                fwd.append(f * 1e3)
                tot.append(t * 1e3)
            row.update(fwd_ms=sorted(fwd)[len(fwd) // 2], fwd_bwd_ms=sorted(tot)[len(tot) // 2])
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
