#!/usr/bin/env python3
"""PyTorch side of `horizon bench attention --device cuda` (scripts/bench/bench_attention_gpu.sh runs both,
interleaved by length). Same shapes (bf16, H = 2048 / D, B = 16384 / T), forward+backward, median of
CUDA-event timings after warm-up, one JSON line per (implementation, case):

  sdpa_flash  torch.nn.functional.scaled_dot_product_attention restricted to the flash backend:
              causal only (it has no window or per-head mask; SWA/SCOPE rows say so);
  sdpa_efficient  with --dtype f32 (the flash backend takes no f32): SDPA restricted to the
              memory-efficient backend, PyTorch's fused f32 attention (exact f32 arithmetic);
  flex        FlexAttention (torch.compile'd) with a BlockMask: causal, sliding window, SCOPE's
              per-head windows (mask_mod reads a per-head window tensor), and scale-invariant
              logits as a score_mod  a_t * score + m_t,  a_t = sqrt(2 ln(1 + t/tau) + 1),
              m_t = -2 ln(1 + t/tau), t = q_idx - kv_idx (score is already scaled by 1/sqrt(D));
              docsN (packed documents of N tokens, causal inside each): the document mask
              q_idx // N == kv_idx // N in mask_mod, FlexAttention's own document-masking recipe;
              chunkN (Llama 4's chunked attention, causal inside chunks of N): the same rule;
              sinkS (the sliding window plus the first S tokens): (t < W) | (kv_idx < S) in mask_mod.

Visible pairs are counted exactly like Horizon (per-head windows, queries see themselves), so the
TFLOP/s columns compare like with like."""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

from bench_attention_torch import scope_windows  # the same SCOPE windows as the CPU benchmark


def doc_len(mask):
    """N of a docsN or chunkN mask (causal inside runs of N tokens: packed documents, Llama 4's chunks), else 0."""
    for p in ("docs", "chunk"):
        if mask.startswith(p):
            return int(mask[len(p):])
    return 0


def sink_tokens(mask):
    """S of a sinkS mask (the sliding window plus the first S tokens), else 0."""
    return int(mask[4:]) if mask.startswith("sink") else 0


def windows(mask, H, T, W):
    if doc_len(mask):
        return [0] * H
    if sink_tokens(mask):
        return [min(W, T)] * H
    return {"causal": [0] * H, "swa": [min(W, T)] * H, "scope": scope_windows(H, T)}[mask]


def visible_pairs(wins, T, N=0, S=0):
    if N:  # causal inside runs of N tokens (the last one shorter)
        lens = [min(N, T - s) for s in range(0, T, N)]
        return len(wins) * sum(L * (L + 1) // 2 for L in lens)
    n = 0
    for w in wins:
        if w == 0 or w >= T:
            n += T * (T + 1) // 2
        else:
            n += T * w - w * (w - 1) // 2
            # the sinks outside row i's window: min(S, i - w + 1) keys for i >= w
            n += sum(min(S, i - w + 1) for i in range(w, T)) if S else 0
    return n


def median_ms(fn, reps, gpu=True):
    for _ in range(3):
        fn()
    if gpu:
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if gpu:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--tau", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--masks", default="causal,swa,scope,docs2048")
    ap.add_argument("--logits", default="identity,scale_invariant")
    ap.add_argument("--flex-cases",
                    default="causal:identity,swa:identity,scope:identity,causal:scale_invariant,scope:scale_invariant,"
                            "docs2048:identity,chunk2048:identity,sink4:identity",
                    help="mask:logits pairs timed with FlexAttention (each costs a torch.compile)")
    ap.add_argument("--fwd", action="store_true", help="also time the forward alone (one more compile per case)")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script on a machine without a GPU")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"],
                    help="f32: SDPA's memory-efficient backend instead of flash (FlexAttention as --flex-cases says)")
    a = ap.parse_args()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    import torch._dynamo
    torch._dynamo.config.cache_size_limit = 64  # one compile per (mask, score_mod, shape); never fall back to eager
    torch._dynamo.config.accumulated_cache_size_limit = 512
    flex = torch.compile(flex_attention, dynamic=False)
    flex_cases = {tuple(c.split(":")) for c in a.flex_cases.split(",") if c}
    T, D = a.T, a.D
    H, B = 2048 // D, max(1, 16384 // T)
    dev, dt = a.device, torch.float32 if a.dtype == "f32" else torch.bfloat16
    sdpa_impl, sdpa_backend = ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION) if a.dtype == "f32" else \
        ("sdpa_flash", SDPBackend.FLASH_ATTENTION)
    gpu = dev == "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    q, k, v, gout = (torch.randn(B, H, T, D, device=dev, dtype=dt, generator=g) for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_(True)

    def emit(impl, mask, logit, fwd_ms, tot_ms, pairs, note=""):
        flops = 4.0 * D * pairs
        print(json.dumps({"impl": impl, "device": torch.cuda.get_device_name() if gpu else "cpu", "torch": torch.__version__,
                          "dtype": a.dtype, "D": D, "B": B, "H": H, "T": T, "mask": mask, "logit": logit, "pairs": pairs,
                          "fwd_ms": fwd_ms, "fwd_bwd_ms": tot_ms,
                          "tflops_fwd": flops / (fwd_ms * 1e-3) / 1e12 if fwd_ms else None,
                          "tflops_fwd_bwd": 3.5 * flops / (tot_ms * 1e-3) / 1e12 if tot_ms else None,
                          # above what was allocated before (q, k, v, dO), as Horizon reports it
                          "peak_mib": (torch.cuda.max_memory_allocated() - base[0]) / 2 ** 20 if gpu else None,
                          "note": note}),
              flush=True)

    base = [0]  # bytes allocated when the case's peak was reset

    def time_pair(fwd):
        def run_fwd():
            with torch.no_grad():
                fwd()

        def run_all():
            for x in (q, k, v):
                x.grad = None
            fwd().backward(gout)

        if gpu:
            for x in (q, k, v):
                x.grad = None
            torch.cuda.reset_peak_memory_stats()
            base[0] = torch.cuda.memory_allocated()
        return median_ms(run_fwd, a.reps, gpu) if a.fwd else None, median_ms(run_all, a.reps, gpu)

    for logit in a.logits.split(","):
        for mask in a.masks.split(","):
            wins = windows(mask, H, T, a.window)
            N, S = doc_len(mask), sink_tokens(mask)
            pairs = B * visible_pairs(wins, T, N, S)
            # SDPA's flash backend (f32: the memory-efficient one): causal, identity logits only
            if mask == "causal" and logit == "identity":
                def sdpa():
                    if not gpu:  # the CPU smoke test: whatever backend the CPU has
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    with sdpa_kernel(sdpa_backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                f, t = time_pair(sdpa)
                emit(sdpa_impl, mask, logit, f, t, pairs)
            else:
                emit(sdpa_impl, mask, logit, None, None, pairs,
                     "n/a: the SDPA backend takes no window, per-head mask or score modification")
            # FlexAttention
            if (mask, logit) not in flex_cases:
                emit("flex", mask, logit, None, None, pairs, "not in --flex-cases")
                continue
            win = torch.tensor(wins, device=dev, dtype=torch.int64)
            uniform = len(set(wins)) == 1

            def mask_mod(b, h, q_idx, kv_idx):
                t = q_idx - kv_idx
                w = win[h]
                same_doc = (q_idx // N == kv_idx // N) if N else True
                sink = (kv_idx < S) if S else False
                return (t >= 0) & (((w == 0) | (t < w)) | sink) & same_doc

            # compiled on a GPU: built block by block (a per-head mask at T 16K, H 32 otherwise
            # materialises (H, T, T) and ran out of memory on an 80 GiB H100)
            bm = create_block_mask(mask_mod, B=None, H=None if uniform else H, Q_LEN=T, KV_LEN=T, device=dev,
                                   _compile=gpu)
            score_mod = None
            if logit == "scale_invariant":
                tau = a.tau

                def score_mod(score, b, h, q_idx, kv_idx):
                    t = (q_idx - kv_idx).clamp(min=0).to(torch.float32)
                    l = torch.log1p(t / tau)
                    return score * torch.sqrt(2.0 * l + 1.0) - 2.0 * l
            elif logit != "identity":
                emit("flex", mask, logit, None, None, pairs, "identity and scale_invariant only")
                continue
            f, t = time_pair(lambda: flex(q, k, v, score_mod=score_mod, block_mask=bm))
            emit("flex", mask, logit, f, t, pairs)


if __name__ == "__main__":
    sys.exit(main())
