"""HorizonForCausalLM's attention paths against its eager reference (hf/remote/modeling_horizon.py), no Horizon needed.

Run: python tests/hf/attention_paths_test.py   (exit 0 when every check passes, 1 otherwise; tests/e2e_hf_export.sh
runs it in its `remote` part, CTest entry e2e_hf_export_remote)

For the tiny random models of remote_code_test.py (every ingredient) and one of masks without score terms
(causal, window with sink tokens, SCOPE, chunks, a prefix, DIFF V2, GQA), loaded in float64 with
attn_implementation "sdpa" and "flex_attention":
  1. logits equal eager's (relative 1e-12) on a left-padded batch, on packed position_ids, and decoding with the
     cache (prefill, then token by token and in chunks) equals eager's full forward;
  2. each layer attends through the path it should (sdpa: the layers without score terms; flex_attention: all
     but LaMPE's), and the fallback is said;
  3. greedy generate() equals eager's; gradients of the loss equal eager's;
  4. gradient checkpointing: the backward equals the plain one (float64, 1e-12), also under flex_attention;
  5. eager stays the default, flash_attention_2 and unknown names are refused with a clear message.
FlexAttention runs uncompiled here (torch 2.15 compiles it on the CPU only for inference in float32 without the
log-sum-exp, and a compile takes ~50 s): the same mods and BlockMask, evaluated densely.
"""
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_code_test as rc  # noqa: E402  (tiny models, loader, checks)
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
TOL = 1e-12
PATHS = ("sdpa", "flex_attention")

# masks without score terms, so that SDPA takes every layer (GQA 4:2; DIFF V2 pairs 8 attention heads)
rc.MODELS["masks"] = dict(
    hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, hidden_act="silu",
    tie_word_embeddings=True, attention_bias=False, train_length=8, num_hidden_layers=5,
    layer_kinds={
        "causal": rc.kind(),
        "window_sinks": rc.kind(mask="window", window=3, sink_tokens=2, qk_norm="per_head"),
        "scope": rc.kind(mask="scope", scopes=[1, 3, 5, 20], pos="none"),
        "chunk": rc.kind(mask="window", window=5, chunk=4, diff=True, gate="element"),
        "prefix": rc.kind(prefix=3, pos="prope"),
    },
    layer_pattern=["causal", "window_sinks", "scope", "chunk", "prefix"],
)
# which layers each path should take (per layer of the model), the rest eager
EXPECT = {
    "mixed": {"sdpa": {7}, "flex_attention": set(range(10))},
    "lampe": {"sdpa": set(), "flex_attention": {2, 3}},  # LaMPE's layers (causal RoPE) stay eager
    "packable": {"sdpa": set(), "flex_attention": set(range(4))},
    "masks": {"sdpa": set(range(5)), "flex_attention": set(range(5))},
    "learned": {"sdpa": {0, 1}, "flex_attention": set(range(3))},  # learned angles rotate before any path; FoX's layer
}


def load(d, impl, **kw):
    m = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True, dtype=torch.float64, attn_implementation=impl, **kw)
    return m.eval()


def paths_of(m):
    return [layer.self_attn.last_path for layer in m.model.layers]


def decode(m, ids, mask, ends):
    """Logits of the calls ids[:, :ends[0]], ids[:, ends[0]:ends[1]], ... with the cache, concatenated."""
    cache, logs, start = None, [], 0
    with torch.no_grad():
        for e in ends:
            out = m(ids[:, start:e], attention_mask=mask[:, :e], cache=cache, use_cache=True)
            cache, start = out.cache, e
            logs.append(out.logits)
    return torch.cat(logs, dim=1)


def test_logits():
    print("1-2. sdpa and flex_attention equal eager (float64): padding, packing, the cache; the paths taken")
    for mname in ("mixed", "lampe", "packable", "masks", "learned"):
        d, c = rc.write_export(mname, seed=5)
        eager = load(d, "eager")
        N = 14
        ids = torch.tensor([rc.ids_for(N, 21), rc.ids_for(N, 22)])
        mask = torch.ones(2, N, dtype=torch.long)
        mask[0, :4] = 0
        docs = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 4, 5]] * 2)
        with torch.no_grad():
            want_pad = eager(ids, attention_mask=mask, use_cache=False).logits
            want_packed = eager(ids, position_ids=docs, use_cache=False).logits if mname != "lampe" else None
        eager.config.context_length = N
        with torch.no_grad():
            want_full = eager(ids, attention_mask=mask, use_cache=False).logits
        for impl in PATHS:
            m = load(d, impl)
            with torch.no_grad():
                e = rc.rel_err(m(ids, attention_mask=mask, use_cache=False).logits[mask.bool()], want_pad[mask.bool()])
                took = {i for i, p in enumerate(paths_of(m)) if p == impl}
                rc.check(f"{mname} {impl}: layers {sorted(took)} take {impl}", took == EXPECT[mname][impl])
                rc.check(f"{mname} {impl}: a left-padded batch", e <= TOL, f"{e:.1e}")
                if want_packed is not None:
                    e = rc.rel_err(m(ids, position_ids=docs, use_cache=False).logits, want_packed)
                    rc.check(f"{mname} {impl}: packed position_ids", e <= TOL, f"{e:.1e}")
            m.config.context_length = N
            if mname == "lampe" or (impl == "flex_attention" and mname != "packable"):
                continue  # FlexAttention traces each layer kind at each new shape (~1 s): it decodes the model with
                #           sinks, FoX, SSMax, the prefix and DIFF here, and the masks' in generate() below
            # prefill (holding the prefix: 4 real tokens and more), then chunks of 2 and 3
            got = decode(m, ids, mask, (9, 11, 14))
            e = rc.rel_err(got[mask.bool()], want_full[mask.bool()])
            rc.check(f"{mname} {impl}: decoding with the cache (prefill, chunks of 2 and 3) equals eager's full forward",
                     e <= TOL, f"{e:.1e}")


def test_generate_and_gradients():
    print("3. generate() and gradients equal eager's")
    for mname in ("masks",):
        d, c = rc.write_export(mname, seed=6)
        prompt = torch.tensor([rc.ids_for(7, 31), rc.ids_for(7, 32)])
        mask = torch.ones_like(prompt)
        mask[1, :2] = 0
        labels = torch.tensor([rc.ids_for(10, 33)])
        runs = {}
        for impl in ("eager",) + PATHS:
            m = load(d, impl)
            m.config.context_length = 12
            with torch.no_grad():
                gen = m.generate(prompt, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
            m.config.context_length = None
            grads = None
            if impl != "flex_attention":  # FlexAttention has no backward on the CPU (the layer runs eager there)
                m.train()
                m(labels, labels=labels, use_cache=False).loss.backward()
                grads = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
            runs[impl] = (gen, grads)
        for impl in PATHS:
            rc.check(f"{mname} {impl}: greedy generate() on a left-padded batch", torch.equal(runs[impl][0], runs["eager"][0]))
        g, want = runs["sdpa"][1], runs["eager"][1]
        e = max(rc.rel_err(g[n], want[n]) for n in want)
        rc.check(f"{mname} sdpa: gradients of every parameter", set(g) == set(want) and e <= TOL, f"{e:.1e}")


def test_checkpointing():
    print("4. gradient checkpointing: the backward equals the plain one (float64)")
    for mname, impl in (("mixed", "eager"), ("masks", "sdpa")):
        d, c = rc.write_export(mname, seed=7)
        ids = torch.tensor([rc.ids_for(11, 41), rc.ids_for(11, 42)])
        mask = torch.ones_like(ids)
        mask[0, :3] = 0
        grads = []
        for ckpt in (False, True):
            m = load(d, impl)
            m.train()
            if ckpt:
                m.activation_checkpointing_enable()  # transformers 5's name of gradient_checkpointing_enable
            out = m(ids, attention_mask=mask, labels=ids)
            out.loss.backward()
            grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
            if ckpt:
                rc.check(f"{mname} {impl}: checkpointing is on in every layer and the call returns no cache",
                         all(layer.gradient_checkpointing for layer in m.model.layers) and out.cache is None)
        e = max(rc.rel_err(grads[1][n], grads[0][n]) for n in grads[0])
        rc.check(f"{mname} {impl}: checkpointed backward equals the plain one", set(grads[0]) == set(grads[1]) and e <= TOL,
                 f"{e:.1e}")


def test_selection():
    print("5. eager by default; flash_attention_2 and unknown names refused")
    d, c = rc.write_export("masks", seed=8)
    m = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True)
    rc.check("no attn_implementation loads eager", m.config._attn_implementation == "eager", m.config._attn_implementation)
    for bad, words in (("flash_attention_2", "flex_attention"), ("bogus", "bogus")):
        try:
            AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True, attn_implementation=bad)
            msg = ""
        except (ValueError, ImportError) as e:
            msg = str(e)
        rc.check(f"attn_implementation={bad!r} is refused naming the alternatives", words in msg, msg[:160])
    m.set_attn_implementation("flex_attention")
    with torch.no_grad():
        m(torch.tensor([rc.ids_for(5, 51)]))
    rc.check("set_attn_implementation('flex_attention') switches a loaded model", set(paths_of(m)) == {"flex_attention"})


def main():
    t0 = time.time()
    for t in (test_logits, test_generate_and_gradients, test_checkpointing, test_selection):
        t1 = time.time()
        try:
            t()
            print(f"  ({t.__name__}: {time.time() - t1:.1f} s)")
        except Exception:
            rc.traceback.print_exc()
            rc.check(f"{t.__name__} ran to the end", False)
    rc.shutil.rmtree(rc.TMP, ignore_errors=True)
    bad = [n for n, ok in rc.RESULTS if not ok]
    print(f"{len(rc.RESULTS)} checks, {len(bad)} failed ({time.time() - t0:.1f} s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
