"""Checks of HorizonForCausalLM (hf/remote/*.py) that need no Horizon: tiny random models written as an
export would be (config.json with auto_map, model.safetensors, the two .py files and horizon_fields.json) and loaded with
AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True).

Run: python tests/hf/remote_code_test.py   (exit 0 when every check passes, 1 otherwise)

Checked, for models whose layer kinds together cover every ingredient (RoPE with none / pi / ntk /
dynamic_ntk / yarn (both ramps) / llama3 / longrope, p-RoPE, partial RoPE, per-pair factors, ALiBi, NoPE; causal /
window / SCOPE (auto, explicit, frozen) masks with GQA, sink tokens beside a window; identity / scale_invariant / logn (visible keys
and position) / swan_row / temperature (beta and temp_c) logits and Llama 4's qtemp; QK-norm full and
per head; gates per head and element; sinks; FoX; DIFF V2's paired heads; LaMPE at l > m; the three MLPs; tied
and untied heads):
  1. a brute-force float64 single-layer formula, written here independently, equals each layer's attention;
  2. RoPE frequencies equal transformers' own (pi / dynamic / yarn index ramp / llama3 / longrope);
  3. prefill + token-by-token decoding with the cache equals the full forward (float32, 1e-5);
  4. greedy generate() with the cache equals greedy argmax over repeated full forwards, also for a
     left-padded batch;
  5. a left-padded batch equals each sequence alone;
  6. packed documents (position_ids restarting at 0) equal each document alone; with a cache they are refused;
  7. float64 (model.double()) computes in float64 and its decoding equals its full forward to 1e-10;
  8. the loss with labels is transformers' shifted mean cross-entropy; config.json round-trips; a layer-kind
     value out of its field's range or type (horizon_fields.json) is refused naming the field.
"""
import copy
import json
import math
import os
import shutil
import sys
import tempfile
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

torch.set_num_threads(1)
hf_logging.set_verbosity_error()
try:
    hf_logging.disable_progress_bar()
except AttributeError:
    pass

REMOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hf", "remote")
F32_TOL, F64_TOL = 1e-5, 1e-10
TMP = tempfile.mkdtemp(prefix="horizon_remote_")

# Horizon's defaults for every field of a layer kind (attention/spec.h); config.json lists them all.
KIND_DEFAULTS = {
    "pos": "rope", "rope_base": 10000.0, "rope_scaling": "none", "rope_factor": 1.0, "rope_original_context": 0,
    "yarn_alpha": 1.0, "yarn_beta": 32.0, "yarn_ramp": "rotations", "yarn_truncate": True, "yarn_mscale": 0.0,
    "llama3_low_freq_factor": 1.0, "llama3_high_freq_factor": 4.0, "prope_fraction": 0.5, "prope_base_eff": 1024.0,
    "rope_pairs": [], "rope_fraction": 1.0, "rope_freq_factors": [], "longrope_long_factors": [],
    "longrope_short_factors": [], "diff": False, "rope_select": "high", "mask": "causal", "window": 0, "chunk": 0, "sink_tokens": 0, "prefix": 0,
    "scope_gamma": 0.0, "scope_min": 1, "scope_max": 0, "scopes": [], "freeze_scopes": False,
    "logit": "identity", "tau": 10.0, "logn_c": 1.0, "logn_learnable": True, "swan_a": 362.0, "beta": 1.0,
    "temp_c": 0.0, "logn_position": False, "qtemp_alpha": 0.0, "qtemp_beta": 8192.0, "qk_norm": "none",
    "gate": "none", "sink": False, "forget": False, "forget_bias": 0.0,
    "rope_angles": "position", "angles_per_head": False, "rotate_v": False, "learned_freqs": "none",
    "additive": "none", "additive_learned_slope": True,
}


def kind(**fields):
    k = dict(KIND_DEFAULTS)
    for key in fields:
        assert key in k, key
    k.update(fields)
    return k


# ---------------------------------------------------------------------------------------------
# Tiny models, written as Horizon's exporter writes them
# ---------------------------------------------------------------------------------------------

MODELS = {
    # every position encoding and scaling, every mask, every logit transform, GQA 4:2
    "mixed": dict(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, hidden_act="silu",
        tie_word_embeddings=True, attention_bias=False, train_length=12, num_hidden_layers=10,
        layer_kinds={
            "yarn_rot_si": kind(rope_scaling="yarn", rope_factor=4.0, yarn_ramp="rotations", logit="scale_invariant",
                                tau=3.0, qk_norm="full", gate="head", mask="window", window=5),
            "yarn_idx_scope": kind(rope_scaling="yarn", rope_factor=3.0, yarn_ramp="index", yarn_truncate=False,
                                   rope_original_context=10, yarn_alpha=0.5, yarn_beta=4.0, logit="logn",
                                   mask="scope", sink=True, rope_base=500.0),
            "prope_swan": kind(pos="prope", prope_fraction=0.75, prope_base_eff=50.0, rope_fraction=0.5,
                               rope_select="uniform", logit="swan_row", swan_a=3.0, qk_norm="per_head", gate="element",
                               qtemp_alpha=0.5, qtemp_beta=4.0),
            "alibi_temp_fox": kind(pos="alibi", logit="temperature", temp_c=0.7, forget=True, forget_bias=1.0,
                                   mask="scope", scopes=[2, 3, 6, 40]),
            "nope_logn_pos": kind(pos="none", logit="logn", logn_position=True, logn_learnable=False, logn_c=0.8,
                                  sink=True, forget=True, mask="window", window=7, additive="query_key"),
            "dyn_pairs": kind(rope_scaling="dynamic_ntk", rope_factor=2.0, rope_pairs=[0, 2],
                              rope_freq_factors=[1.0, 0.5, 2.0, 0.25], logit="temperature", beta=1.3,
                              mask="scope", scope_gamma=1.6, scope_min=2, scope_max=9),
            "llama3_frozen": kind(rope_scaling="llama3", rope_factor=8.0, llama3_low_freq_factor=0.5,
                                  llama3_high_freq_factor=2.0, rope_original_context=8, mask="scope",
                                  freeze_scopes=True, logit="logn", qtemp_alpha=0.3, qtemp_beta=3.0),
            "pi_ntk_low": kind(rope_scaling="pi", rope_factor=2.0, rope_fraction=0.5, rope_select="low", gate="head"),
            "longrope_sinks": kind(rope_scaling="longrope", rope_factor=2.0, rope_original_context=6,
                                   longrope_long_factors=[1.0, 1.5, 2.5, 4.0], longrope_short_factors=[1.0, 1.0, 1.1, 1.2],
                                   mask="window", window=4, sink_tokens=2, logit="logn"),
            "ntk_high": kind(rope_scaling="ntk", rope_factor=3.0, rope_fraction=0.75, rope_select="high",
                             logit="scale_invariant", tau=1.5, forget=True, qk_norm="full", additive="alibi"),
        },
        layer_pattern=["yarn_rot_si", "yarn_idx_scope", "prope_swan", "alibi_temp_fox", "nope_logn_pos",
                       "dyn_pairs", "llama3_frozen", "pi_ntk_low", "ntk_high"],
        layer_overrides={"9": "longrope_sinks"},
    ),
    # LaMPE on the causal RoPE layers (l > m), relu2, untied head, q/k/v biases, MHA
    "lampe": dict(
        hidden_size=24, num_attention_heads=3, num_key_value_heads=3, head_dim=8, hidden_act="relu2",
        tie_word_embeddings=False, attention_bias=True, train_length=16, num_hidden_layers=4,
        layer_kinds={
            "rope_si": kind(logit="scale_invariant", tau=2.0, rope_base=100.0),
            "rope_plain": kind(rope_base=50.0, qk_norm="per_head", gate="element"),
            "swa": kind(mask="window", window=4, logit="swan_row", swan_a=5.0),
            "prope_temp": kind(pos="prope", logit="temperature", temp_c=0.5, qtemp_alpha=0.2, qtemp_beta=5.0),
        },
        layer_pattern=["rope_si", "rope_plain", "swa", "prope_temp"],
        lampe={"L": 12.0, "a": 0.05, "b": 0.0, "s_local": 4, "s_sink": 2},
    ),
    # no term that depends on the whole call's length (so packed documents equal each document alone
    # even with context_length null), gelu, GQA 4:1, untied
    "packable": dict(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=1, head_dim=8, hidden_act="gelu",
        tie_word_embeddings=False, attention_bias=True, train_length=6, num_hidden_layers=4,
        layer_kinds={
            "alibi_temp_fox": kind(pos="alibi", logit="temperature", temp_c=0.6, forget=True, mask="scope",
                                   scopes=[1, 2, 5, 30], sink=True),
            "rope_swan_swa": kind(logit="swan_row", swan_a=4.0, mask="window", window=6, gate="head", diff=True,
                                  additive="key", additive_learned_slope=False),
            "nope_logn": kind(pos="none", logit="logn", logn_position=True, qtemp_alpha=0.4, qtemp_beta=2.0, diff=True,
                              prefix=4),
            "yarn_ssmax": kind(rope_scaling="yarn", rope_factor=2.0, yarn_ramp="index", logit="logn",
                               qk_norm="per_head", forget=True),
        },
        layer_pattern=["alibi_temp_fox", "rope_swan_swa", "nope_logn", "yarn_ssmax"],
    ),
    # learned angles (issue 58): accumulated per KV head with V rotated and GRAPE-M per head under a window;
    # accumulated shared with V rotated under YaRN's mscale, partial pairs and DIFF V2; GRAPE-M per layer
    # from rope_freq_factors at positions, with FoX; GQA 4:2
    "learned": dict(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, hidden_act="silu",
        tie_word_embeddings=True, attention_bias=False, train_length=12, num_hidden_layers=3,
        layer_kinds={
            "acc_head_v": kind(rope_angles="accumulated", angles_per_head=True, rotate_v=True, learned_freqs="head",
                               mask="window", window=5),
            "acc_yarn_v_diff": kind(rope_angles="accumulated", rotate_v=True, rope_scaling="yarn", rope_factor=2.0,
                                    rope_original_context=10, rope_pairs=[0, 2], diff=True),
            "grape_fox": kind(learned_freqs="layer", rope_freq_factors=[1.0, 0.5, 2.0, 0.25], forget=True),
        },
        layer_pattern=["acc_head_v", "acc_yarn_v_diff", "grape_fox"],
    ),
}

VOCAB = 61


def config_json(spec):
    c = {
        "architectures": ["HorizonForCausalLM"], "model_type": "horizon",
        "auto_map": {"AutoConfig": "configuration_horizon.HorizonConfig",
                     "AutoModelForCausalLM": "modeling_horizon.HorizonForCausalLM"},
        "vocab_size": VOCAB, "intermediate_size": 40, "rms_norm_eps": 1e-5, "initializer_range": 0.02,
        "context_length": None, "layer_overrides": {}, "lampe": None,
        "window_convention": "A window W lets a query see itself and the W-1 keys before it.",
        "bos_token_id": 1, "eos_token_id": None, "pad_token_id": 0, "torch_dtype": "float32",
    }
    c.update(copy.deepcopy(spec))
    c["max_position_embeddings"] = c["train_length"]
    return c


def layer_kind_of(c, i):
    name = c["layer_overrides"].get(str(i), c["layer_pattern"][i % len(c["layer_pattern"])])
    return c["layer_kinds"][name]


def random_weights(c, seed):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=0.3, mean=0.0):
        return torch.randn(*shape, generator=g) * std + mean

    C, H, Hkv, D, Fh = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
    w = {"model.embed_tokens.weight": rnd(VOCAB, C, std=1.0), "model.norm.weight": rnd(C, std=0.1, mean=1.0)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = rnd(VOCAB, C, std=0.3)
    for i in range(c["num_hidden_layers"]):
        k = layer_kind_of(c, i)
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = rnd(C, std=0.1, mean=1.0)
        w[p + "post_attention_layernorm.weight"] = rnd(C, std=0.1, mean=1.0)
        Ha = 2 * H if k["diff"] else H  # DIFF V2: 2H query heads and a lambda per output head
        w[p + "self_attn.q_proj.weight"] = rnd(Ha * D, C)
        if k["diff"]:
            w[p + "self_attn.lambda_proj.weight"] = rnd(H, C)
        w[p + "self_attn.k_proj.weight"] = rnd(Hkv * D, C)
        w[p + "self_attn.v_proj.weight"] = rnd(Hkv * D, C)
        w[p + "self_attn.o_proj.weight"] = rnd(C, H * D, std=0.2)
        if c["attention_bias"]:
            for n, rows in (("q", Ha * D), ("k", Hkv * D), ("v", Hkv * D)):
                w[p + f"self_attn.{n}_proj.bias"] = rnd(rows, std=0.1)
        if k["qk_norm"] == "full":
            w[p + "self_attn.q_norm.weight"] = rnd(Ha * D, std=0.2, mean=1.0)
            w[p + "self_attn.k_norm.weight"] = rnd(Hkv * D, std=0.2, mean=1.0)
        elif k["qk_norm"] == "per_head":
            w[p + "self_attn.q_norm.weight"] = rnd(D, std=0.2, mean=1.0)
            w[p + "self_attn.k_norm.weight"] = rnd(D, std=0.2, mean=1.0)
        if k["gate"] != "none":
            w[p + "self_attn.gate_proj.weight"] = rnd(H if k["gate"] == "head" else H * D, C)
        if k["logit"] == "logn" and k["logn_learnable"]:
            w[p + "self_attn.logn_c"] = rnd(Ha, std=0.2, mean=0.8)
        if k["sink"]:
            w[p + "self_attn.sinks"] = rnd(Ha, std=1.0)
        if k["forget"]:
            w[p + "self_attn.forget_proj.weight"] = rnd(Ha, C, std=0.3)
            w[p + "self_attn.forget_proj.bias"] = rnd(Ha, std=0.5, mean=k["forget_bias"] + 1.0)
        if k["rope_angles"] == "accumulated":
            G = Hkv if k["angles_per_head"] else 1
            w[p + "self_attn.angle_proj.weight"] = rnd(G * (D // 2), C, std=0.3)
            w[p + "self_attn.angle_proj.bias"] = rnd(G * (D // 2), std=0.3, mean=0.5)
        if k["learned_freqs"] != "none":
            w[p + "self_attn.freq_factors"] = rnd((Hkv if k["learned_freqs"] == "head" else 1) * (D // 2), std=0.3,
                                                  mean=1.0)
        if k["additive"] in ("key", "query_key"):  # GRAPE-A's directions and omega's w
            w[p + "self_attn.additive_u"] = rnd(Ha, D, std=0.5)
        if k["additive"] in ("query", "query_key"):
            w[p + "self_attn.additive_v"] = rnd(Ha, D, std=0.5)
        if k["additive"] in ("key", "query", "query_key") and k["additive_learned_slope"]:
            w[p + "self_attn.additive_w"] = rnd(Ha, std=0.5, mean=0.5)
        if c["hidden_act"] == "silu":
            w[p + "mlp.gate_proj.weight"] = rnd(Fh, C)
        w[p + "mlp.up_proj.weight"] = rnd(Fh, C)
        w[p + "mlp.down_proj.weight"] = rnd(C, Fh, std=0.2)
    return w


def write_export(name, seed=0, **override):
    c = config_json(MODELS[name])
    c.update(override)
    d = os.path.join(TMP, f"{name}_{seed}")
    os.makedirs(d, exist_ok=True)
    for f in ("configuration_horizon.py", "modeling_horizon.py", "horizon_fields.json"):
        shutil.copy(os.path.join(REMOTE, f), d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    save_file(random_weights(c, seed), os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    return d, c


def load(d, dtype=torch.float32):
    m = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True, dtype=dtype)
    m.eval()
    return m


def rel_err(got, want):
    got, want = got.to(torch.float64), want.to(torch.float64)
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def ids_for(n, seed, low=2):
    return torch.randint(low, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def logits_alone(m, ids):
    with torch.no_grad():
        return m(torch.tensor([ids]), use_cache=False).logits[0]


# ---------------------------------------------------------------------------------------------
# An independent brute-force single attention layer (float64, loops over heads, queries and keys)
# ---------------------------------------------------------------------------------------------

def bf_frequencies(k, D, T, train_length):
    """w_m and mscale straight from the definitions (docs/methods.md, attention/rope.h)."""
    half = D // 2
    if k["pos"] == "prope":
        keep = max(1, int(math.floor(k["prope_fraction"] * half + 0.5)))
        w = [k["prope_base_eff"] ** (-m / (keep - 1)) if keep > 1 else 1.0 for m in range(keep)] + [0.0] * (half - keep)
        ms = 1.0
    else:
        base, s, C = k["rope_base"], k["rope_factor"], k["rope_original_context"] or train_length or T
        sc = k["rope_scaling"]
        if sc == "dynamic_ntk":
            s = s * T / C - (s - 1) if T > C else 1.0
        if sc in ("ntk", "dynamic_ntk") and s > 1:
            base *= s ** (D / (D - 2))
        w = [base ** (-2 * m / D) for m in range(half)]
        ms = 1.0
        if sc == "pi" and s > 1:
            w = [x / s for x in w]
        if sc == "longrope":  # LongRoPE: divided by the long factors past C, by the short ones within
            lam = k["longrope_long_factors"] if T > C else (k["longrope_short_factors"] or [1.0] * half)
            w = [x / f for x, f in zip(w, lam)]
            if s > 1:
                ms = k["yarn_mscale"] or math.sqrt(1 + math.log(s) / math.log(C))
        if sc in ("yarn", "llama3") and s > 1:
            if sc == "llama3":
                lo_r, hi_r = k["llama3_low_freq_factor"], k["llama3_high_freq_factor"]
            else:
                lo_r, hi_r = k["yarn_alpha"], k["yarn_beta"]
            new = []
            for m, x in enumerate(w):
                if sc == "yarn" and k["yarn_ramp"] == "index":
                    lo = D * math.log(C / (hi_r * 2 * math.pi)) / (2 * math.log(k["rope_base"]))
                    hi = D * math.log(C / (lo_r * 2 * math.pi)) / (2 * math.log(k["rope_base"]))
                    if k["yarn_truncate"]:
                        lo, hi = math.floor(lo), math.ceil(hi)
                    lo, hi = max(lo, 0), min(hi, D - 1)
                    hi = hi + 0.001 if lo == hi else hi
                    keep = 1 - min(max((m - lo) / (hi - lo), 0), 1)
                else:
                    rot = C * x / (2 * math.pi)
                    keep = min(max((rot - lo_r) / (hi_r - lo_r), 0), 1)
                new.append(keep * x + (1 - keep) * x / s)
            w = new
            if sc == "yarn":
                ms = k["yarn_mscale"] or 0.1 * math.log(s) + 1
    if k["rope_pairs"] or k["rope_fraction"] < 1:
        if k["rope_pairs"]:
            on = set(k["rope_pairs"])
        else:
            n = int(math.floor(k["rope_fraction"] * half + 0.5))
            on = {"high": set(range(n)), "low": set(range(half - n, half)),
                  "uniform": {i * half // n for i in range(n)}}[k["rope_select"]] if n < half else set(range(half))
        w = [x if m in on else 0.0 for m, x in enumerate(w)]
    if k["rope_freq_factors"]:
        w = [x * f for x, f in zip(w, k["rope_freq_factors"])]
    return w, ms


def bf_windows(k, H, T, train_length):
    if k["mask"] == "causal":
        return [0] * H
    if k["mask"] == "window":
        return [k["window"]] * H
    if k["scopes"]:
        return list(k["scopes"])
    TT = train_length if k["freeze_scopes"] else T
    gamma = k["scope_gamma"] or TT ** (1 / H)
    out = []
    for h in range(1, H + 1):
        g = gamma ** h
        v = round(g) if abs(g - round(g)) < 1e-9 * max(1, round(g)) else math.ceil(g)
        out.append(min(max(v, k["scope_min"]), k["scope_max"] or TT))
    return out


def bf_rotate(vec, pos, w, ms):
    half = len(w)
    out = vec.clone()
    for m in range(half):
        a = pos * w[m]
        x1, x2 = vec[m].item(), vec[m + half].item()
        out[m] = ms * (x1 * math.cos(a) - x2 * math.sin(a))
        out[m + half] = ms * (x1 * math.sin(a) + x2 * math.cos(a))
    return out


def bf_rotate_by(vec, angles, ms):
    half = len(angles)
    out = vec.clone()
    for m in range(half):
        a, x1, x2 = angles[m], vec[m].item(), vec[m + half].item()
        out[m] = ms * (x1 * math.cos(a) - x2 * math.sin(a))
        out[m + half] = ms * (x1 * math.sin(a) + x2 * math.cos(a))
    return out


def bf_rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def bf_attention(att, k, x, mask, pos, cfg):
    """Layer output (B, T, C) for normed input x (B, T, C), attention mask and positions (B, T)."""
    B, T, C = x.shape
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    L = cfg["train_length"]
    sd = {n: p.detach() for n, p in att.state_dict().items()}

    def lin(name, inp):
        y = inp @ sd[name + ".weight"].T
        return y + sd[name + ".bias"] if name + ".bias" in sd else y

    out = torch.zeros(B, T, H * D, dtype=torch.float64)
    lampe = cfg["lampe"]
    for b in range(B):
        xb = x[b]
        q, kk, v = lin("q_proj", xb), lin("k_proj", xb), lin("v_proj", xb)
        if k["qk_norm"] == "full":
            q, kk = bf_rms(q, sd["q_norm.weight"], 1e-6), bf_rms(kk, sd["k_norm.weight"], 1e-6)
        R = 2 if k["diff"] else 1  # DIFF V2: R = 2 attention heads per output head
        q, kk, v = q.view(T, R * H, D), kk.view(T, Hkv, D), v.view(T, Hkv, D)
        if k["qk_norm"] == "per_head":
            q, kk = bf_rms(q, sd["q_norm.weight"], 1e-6), bf_rms(kk, sd["k_norm.weight"], 1e-6)
        real = [j for j in range(T) if mask[b, j]]
        doc, d = {}, -1
        for n, j in enumerate(real):
            if n == 0 or pos[b, j] != pos[b, real[n - 1]] + 1:
                d += 1
            doc[j] = d
        Tseq = cfg["context_length"] or len(real)
        doc_len = {dd: sum(1 for j in real if doc[j] == dd) for dd in set(doc.values())}
        wins = bf_windows(k, H, Tseq, L)
        rotary = k["pos"] in ("rope", "prope")
        learned = k["pos"] == "rope" and (k["rope_angles"] == "accumulated" or k["rotate_v"] or k["learned_freqs"] != "none")
        kf = dict(k, rope_freq_factors=[]) if k["learned_freqs"] != "none" else k  # trained factors replace them
        w, ms = bf_frequencies(kf, D, Tseq, L) if rotary else (None, 1.0)
        theta = {}  # learned angles: (token, kv head) -> D/2 angles
        if learned:
            half, run = D // 2, {}
            for j in real:  # accumulated: the running sum over the real tokens of w_m softplus(x_j . angle_proj)
                for g_ in range(Hkv):
                    if k["rope_angles"] == "accumulated":
                        st = torch.nn.functional.softplus(lin("angle_proj", xb[j]))
                        G_ = len(st) // half
                        gi = g_ if G_ > 1 else 0
                        run[g_] = [run.get(g_, [0.0] * half)[m] + w[m] * st[gi * half + m].item() for m in range(half)]
                        a_ = run[g_]
                    else:
                        a_ = [pos[b, j].item() * w[m] for m in range(half)]
                    if k["learned_freqs"] != "none":
                        ff = sd["freq_factors"]
                        gi = g_ if len(ff) > half else 0
                        a_ = [a_[m] * ff[gi * half + m].item() for m in range(half)]
                    theta[j, g_] = a_
        use_lampe = lampe is not None and k["pos"] == "rope" and all(x_ == 0 for x_ in wins)
        logf = None
        if k["forget"]:
            logf = torch.nn.functional.logsigmoid(lin("forget_proj", xb))  # (T, H)

        def softplus(a):
            return math.log1p(math.exp(a)) if a < 30 else a + math.log1p(math.exp(-a))

        def gate(name, ha, vec):  # GRAPE-A: softplus(unit(dir_ha) . vec / sqrt(D)), vec before any rotation
            d = sd[name][ha]
            return softplus((d / math.sqrt((d * d).sum().item() + 1e-12) @ vec).item() / math.sqrt(D))
        att_out = {}  # (i, attention head) -> output
        for ha in range(R * H):
            h = ha // R  # its output head: the window and the ALiBi slope are the output head's
            g = ha // (R * H // Hkv)
            for i in real:
                p = pos[b, i].item()
                C_ = k["chunk"]  # Llama 4's chunks and StreamingLLM's sink tokens (the document's first positions)
                P_ = k["prefix"]  # prefix-LM: the document's first P positions see each other, either order
                vis = [j for j in real if doc[j] == doc[i] and ((j <= i and (
                    ((wins[h] == 0 or p - pos[b, j].item() < wins[h]) and (C_ == 0 or p // C_ == pos[b, j].item() // C_))
                    or pos[b, j].item() < k["sink_tokens"])) or (p < P_ and pos[b, j].item() < P_))]
                if not vis:
                    continue

                def qk(j):
                    pj = pos[b, j].item()
                    if learned:
                        return (bf_rotate_by(q[i, ha], theta[i, g], ms) @ bf_rotate_by(kk[j, g], theta[j, g], ms)).item() / math.sqrt(D), 0
                    if not rotary:
                        return (q[i, ha] @ kk[j, g]).item() / math.sqrt(D), 0
                    if not use_lampe:
                        return (bf_rotate(q[i, ha], p, w, ms) @ bf_rotate(kk[j, g], pj, w, ms)).item() / math.sqrt(D), 0
                    l_ = Tseq
                    mlen = lampe["L"] / (1 + math.exp(-(lampe["a"] * l_ + lampe["b"])))
                    sl, ss = lampe["s_local"], lampe["s_sink"]
                    span = l_ - sl - ss
                    rho = min(1.0, max(0.0, (mlen - sl - ss) / span)) if span > 0 else 1.0
                    if p - pj < sl:
                        qp, kp, rg = p, pj, 0
                    elif pj < ss:
                        qp, kp, rg = min(p, math.floor(mlen) + 1), pj, 1
                    else:
                        qp, kp, rg = sl + math.floor((p - sl) * rho), math.floor(pj * rho), 2
                    return (bf_rotate(q[i, ha], qp, w, ms) @ bf_rotate(kk[j, g], kp, w, ms)).item() / math.sqrt(D), rg

                scores = {j: qk(j) for j in vis}
                logits = {}
                for j in vis:
                    s = scores[j][0]
                    t = abs(p - pos[b, j].item())
                    r = 1.0
                    if k["logit"] == "logn":
                        n = p + 1 if k["logn_position"] else len(vis)
                        c = sd["logn_c"][ha].item() if k["logn_learnable"] else k["logn_c"]
                        r = c * math.log(n)
                    elif k["logit"] == "swan_row":
                        r = math.log(k["swan_a"] + p) / math.log(k["swan_a"])
                    elif k["logit"] == "temperature":
                        if k["temp_c"]:
                            sc = (cfg["context_length"] or doc_len[doc[i]]) / L
                            r = 1 + k["temp_c"] * math.log(sc) if sc > 1 else 1.0
                        else:
                            r = k["beta"]
                    if k["qtemp_alpha"]:
                        r *= 1 + k["qtemp_alpha"] * math.log(math.floor((p + 1) / k["qtemp_beta"]) + 1)
                    a, mb = 1.0, 0.0
                    if k["logit"] == "scale_invariant":
                        a = math.sqrt(2 * math.log(1 + t / k["tau"]) + 1)
                        mb = -2 * math.log(1 + t / k["tau"])
                    val = r * a * s + mb
                    if k["pos"] == "alibi" or k["additive"] == "alibi":  # ALiBi, or beside RoPE
                        val -= 2 ** (-8 * (h + 1) / H) * t
                    if k["additive"] in ("key", "query", "query_key"):  # GRAPE-A: - t omega_h (g_q(i) + g_k(j))
                        w_ = sd["additive_w"][ha].item() if k["additive_learned_slope"] else math.log(math.e - 1)
                        rate = gate("additive_u", ha, kk[j, g]) if k["additive"] != "query" else 0.0
                        rate += gate("additive_v", ha, q[i, ha]) if k["additive"] != "key" else 0.0
                        val -= t * softplus(w_) * 2 ** (-8 * (h + 1) / H) * rate
                    if logf is not None:
                        val += sum(logf[mm, ha].item() for mm in range(j + 1, i + 1))
                    logits[j] = val
                mx = max(logits.values())
                z = sd["sinks"][ha].item() if k["sink"] else None
                if z is not None:
                    mx = max(mx, z)
                den = sum(math.exp(val - mx) for val in logits.values()) + (math.exp(z - mx) if z is not None else 0)
                if learned and k["rotate_v"]:  # v_j by theta_j, the output back by -theta_i
                    o_ = sum(math.exp(logits[j] - mx) / den * bf_rotate_by(v[j, g], theta[j, g], 1.0) for j in vis)
                    att_out[i, ha] = bf_rotate_by(o_, [-a_ for a_ in theta[i, g]], 1.0)
                else:
                    att_out[i, ha] = sum(math.exp(logits[j] - mx) / den * v[j, g] for j in vis)
        for i in real:
            for h in range(H):
                zero = torch.zeros(D, dtype=torch.float64)
                o = att_out.get((i, R * h), zero)
                if k["diff"]:  # DIFF V2: o_h = A_2h V - sigmoid(x . w_h) A_2h+1 V
                    o = o - torch.sigmoid(lin("lambda_proj", xb[i])[h]) * att_out.get((i, 2 * h + 1), zero)
                if k["gate"] == "head":
                    o = o * torch.sigmoid(lin("gate_proj", xb[i])[h])
                elif k["gate"] == "element":
                    o = o * torch.sigmoid(lin("gate_proj", xb[i])[h * D:(h + 1) * D])
                out[b, i, h * D:(h + 1) * D] = o
    return lin("o_proj", out)


# ---------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, ok))
    print(f"  {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")


def test_brute_force():
    """1. each layer's attention (float64) against the loop formula, on a left-padded batch and packed documents."""
    print("1. brute-force single-layer formula (float64)")
    for mname in ("mixed", "lampe", "packable", "learned"):
        d, c = write_export(mname, seed=1)
        m = load(d, torch.float64)
        C = c["hidden_size"]
        g = torch.Generator().manual_seed(5)
        T = 19 if mname == "lampe" else 14
        x = torch.randn(2, T, C, generator=g, dtype=torch.float64)
        mask = torch.ones(2, T, dtype=torch.long)
        mask[0, :4] = 0  # left padding
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cases = [("left-padded", x, mask, pos, None), ("left-padded, context_length 30", x, mask, pos, 30)]
        if mname != "lampe":
            ppos = torch.tensor([list(range(5)) + list(range(6)) + list(range(T - 11))] * 2)
            cases.append(("packed", x, torch.ones(2, T, dtype=torch.long), ppos, 25))
        worst = 0.0
        for label, xx, mk, ps, ctx_len in cases:
            m.config.context_length = ctx_len
            cfg = dict(c, context_length=ctx_len)
            ctx = m.model._context(2, T, xx.device, mk, ps, None)
            for i, layer in enumerate(m.model.layers):
                att = layer.self_attn
                with torch.no_grad():
                    got = att(xx, ctx, None)
                want = bf_attention(att, att.kind, xx, mk, ps, cfg)
                sel = mk.bool()
                e = rel_err(got[sel], want[sel])
                worst = max(worst, e)
                if not e <= F64_TOL:
                    check(f"{mname} layer {i} ({c['layer_overrides'].get(str(i)) or c['layer_pattern'][i % len(c['layer_pattern'])]}), {label}", False, f"{e:.2e}")
        m.config.context_length = None
        check(f"{mname}: every layer equals the formula", worst <= F64_TOL, f"worst relative error {worst:.2e}")


def test_frequencies_vs_transformers():
    """2. rope_frequencies against transformers' RoPE initialisers."""
    print("2. RoPE frequencies vs transformers")
    d, _ = write_export("packable", seed=0)
    mod = sys.modules[type(load(d)).__module__]  # the loaded modeling_horizon
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    D, C = 64, 512
    cases = [
        ("pi", kind(rope_scaling="pi", rope_factor=4.0), {"rope_type": "linear", "factor": 4.0}),
        ("dynamic_ntk T=2000", kind(rope_scaling="dynamic_ntk", rope_factor=2.0),
         {"rope_type": "dynamic", "factor": 2.0}),
        ("yarn index, truncate", kind(rope_scaling="yarn", rope_factor=8.0, yarn_ramp="index"),
         {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": C, "beta_fast": 32.0, "beta_slow": 1.0}),
        ("yarn index, exact", kind(rope_scaling="yarn", rope_factor=8.0, yarn_ramp="index", yarn_truncate=False),
         {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": C, "truncate": False}),
        ("llama3", kind(rope_scaling="llama3", rope_factor=8.0),
         {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": C}),
    ]
    lf = [1.0 + 0.15 * m for m in range(D // 2)]
    sf = [1.0 + 0.01 * m for m in range(D // 2)]
    for T in (C, 2 * C):  # LongRoPE: the short factors within C, the long ones past it
        cases.append((f"longrope T={T}", kind(rope_scaling="longrope", rope_factor=4.0, rope_original_context=C,
                                              longrope_long_factors=lf, longrope_short_factors=sf),
                      {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": C,
                       "long_factor": lf, "short_factor": sf}))
    for label, k, rp in cases:
        rp = dict(rp, rope_theta=10000.0)
        lc = LlamaConfig(hidden_size=D * 2, num_attention_heads=2, head_dim=D, max_position_embeddings=C,
                         rope_parameters=rp)
        fn = ROPE_INIT_FUNCTIONS[rp["rope_type"]]
        T = 2000 if "dynamic" in label else int(label.split("T=")[1]) if "longrope" in label else C
        want, want_scale = fn(lc, "cpu", seq_len=T) if "dynamic" in label or "longrope" in label else fn(lc, "cpu")
        got, got_scale = mod.rope_frequencies(k, D, T, C)
        e = rel_err(torch.tensor(got), want.to(torch.float64))
        ok = e < 1e-6 and abs(got_scale - want_scale) < 1e-6
        check(f"{label}", ok, f"relative error {e:.1e}, mscale {got_scale:.6f} vs {want_scale:.6f}")
    # SCOPE: S_h = ceil(T^(h/H)); exact powers stay exact
    check("SCOPE scopes for T=16, H=4 are [2, 4, 8, 16]", mod.scope_windows(4, 16) == [2, 4, 8, 16], str(mod.scope_windows(4, 16)))
    check("SCOPE scopes for T=1000, H=3 are [10, 100, 1000]", mod.scope_windows(3, 1000) == [10, 100, 1000])
    # scale-invariant test vectors of docs/methods.md (tau 10)
    for t, a, m_ in ((1, 1.0912, -0.1906), (10, 1.5448, -1.3863), (100, 2.4074, -4.7958)):
        l_ = math.log1p(t / 10)
        ok = abs(math.sqrt(2 * l_ + 1) - a) < 1e-4 and abs(-2 * l_ - m_) < 1e-4
        check(f"scale-invariant a_t, m_t at t={t}", ok)


def decode_all(m, ids, prefill, chunk=1, mask=None):
    """Prefill `prefill` tokens, then feed the rest `chunk` at a time; all logits (B, N, V)."""
    n = ids.shape[1]
    with torch.no_grad():
        out = m(ids[:, :prefill], attention_mask=None if mask is None else mask[:, :prefill], use_cache=True)
        cache, logs = out.cache, [out.logits]
        t = prefill
        while t < n:
            e = min(n, t + chunk)
            out = m(ids[:, t:e], attention_mask=None if mask is None else mask[:, :e], cache=cache, use_cache=True)
            cache = out.cache
            logs.append(out.logits)
            t = e
    return torch.cat(logs, dim=1)


def test_cache_equals_full():
    """3. cached decoding vs the full forward (context_length = the whole length, as Horizon decodes)."""
    print("3. prefill + decoding with the cache equals the full forward (float32)")
    for mname in ("mixed", "lampe", "packable", "learned"):
        d, c = write_export(mname, seed=2)
        m = load(d)
        N = 40
        ids = torch.tensor([ids_for(N, 11), ids_for(N, 12)])
        for ctx_len in (N, 48):
            m.config.context_length = ctx_len
            with torch.no_grad():
                full = m(ids, use_cache=False).logits
            e1 = rel_err(decode_all(m, ids, 9), full)
            e3 = rel_err(decode_all(m, ids, 4, chunk=3), full)  # the prompt holds packable's prefix of 4
            check(f"{mname}, context_length {ctx_len}: token by token / chunks of 3", max(e1, e3) <= F32_TOL,
                  f"{e1:.1e} / {e3:.1e}")
        # a left-padded batch decoded with the cache equals its own full forward
        m.config.context_length = N
        mask = torch.ones(2, N, dtype=torch.long)
        mask[0, :7] = 0
        with torch.no_grad():
            full = m(ids, attention_mask=mask, use_cache=False).logits
        e = rel_err(decode_all(m, ids, 12, mask=mask)[mask.bool()], full[mask.bool()])
        check(f"{mname}: left-padded batch, decoding vs full", e <= F32_TOL, f"{e:.1e}")
        m.config.context_length = None


def greedy_reference(m, prompt, n):
    """Greedy argmax over repeated full forwards (no cache); also the smallest top-2 margin met."""
    ids = list(prompt)
    margin = float("inf")
    for _ in range(n):
        lg = logits_alone(m, ids)[-1]
        top = torch.topk(lg, 2).values
        margin = min(margin, (top[0] - top[1]).item() / lg.abs().max().item())
        ids.append(int(lg.argmax()))
    return ids[len(prompt):], margin


def test_generate():
    """4. generate() with the cache vs repeated full forwards."""
    print("4. greedy generate() with the cache equals greedy argmax over full forwards")
    new = 12
    prompts = [ids_for(13, 21), ids_for(7, 22)]
    L0, L1 = len(prompts[0]), len(prompts[1])
    # "static": no length-dependent term, so context_length null decodes exactly too
    static = copy.deepcopy(MODELS["packable"]["layer_kinds"])
    static["alibi_temp_fox"].update(temp_c=0.0, beta=1.4)
    for mname, override, lengths in (("mixed", {}, (L0 + new,)), ("lampe", {}, (L0 + new,)),
                                     ("packable", {}, (L0 + new, 40)),
                                     ("packable", {"layer_kinds": static}, (None, L0 + new))):
        d, c = write_export(mname, seed=3, **override)
        m = load(d)
        label = mname + (" (static)" if override else "")
        for ctx_len in lengths:
            m.config.context_length = ctx_len
            p = prompts[0]
            want, margin = greedy_reference(m, p, new)
            with torch.no_grad():
                out = m.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 max_new_tokens=new, do_sample=False, use_cache=True, pad_token_id=0)
            got = out[0, len(p):].tolist()
            ok = got == want or margin < 1e-5
            check(f"{label}, context_length {ctx_len}: generate() {new} tokens", ok,
                  "equal" if got == want else f"differs at a near tie (margin {margin:.1e})" if ok else f"{got} != {want}")
            # left-padded batch: each row as its prompt alone
            batch = torch.tensor([prompts[0], [0] * (L0 - L1) + prompts[1]])
            mask = torch.tensor([[1] * L0, [0] * (L0 - L1) + [1] * L1])
            with torch.no_grad():
                out = m.generate(batch, attention_mask=mask, max_new_tokens=new, do_sample=False, use_cache=True,
                                 pad_token_id=0)
            ok = True
            for r, pr in enumerate(prompts):
                want, margin = greedy_reference(m, pr, new)
                ok &= out[r, L0:].tolist() == want or margin < 1e-5
            check(f"{label}, context_length {ctx_len}: generate() on a left-padded batch equals each prompt alone", ok)
        m.config.context_length = None


def test_left_padding():
    """5. a left-padded batch equals each sequence alone."""
    print("5. left-padded batch vs each sequence alone")
    for mname in ("mixed", "lampe", "packable", "learned"):
        d, c = write_export(mname, seed=4)
        m = load(d)
        a, b = ids_for(17, 31), ids_for(30, 32)
        batch = torch.tensor([[0] * 13 + a, b])
        mask = torch.tensor([[0] * 13 + [1] * 17, [1] * 30])
        for ctx_len in (None, 60):
            m.config.context_length = ctx_len
            with torch.no_grad():
                both = m(batch, attention_mask=mask, use_cache=False).logits
            e = max(rel_err(both[0, 13:], logits_alone(m, a)), rel_err(both[1], logits_alone(m, b)))
            check(f"{mname}, context_length {ctx_len}", e <= F32_TOL, f"{e:.1e}")
            # explicit position_ids as generate() makes them (pads at position 1)
            pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
            with torch.no_grad():
                both2 = m(batch, attention_mask=mask, position_ids=pos, use_cache=False).logits
            e2 = rel_err(both2[mask.bool()], both[mask.bool()])
            check(f"{mname}, context_length {ctx_len}: with generate()'s position_ids", e2 <= F32_TOL, f"{e2:.1e}")
        m.config.context_length = None


def test_packed():
    """6. packed documents through position_ids equal the documents alone; refused with a cache."""
    print("6. packed documents (position_ids restart at 0) vs each document alone")
    for mname, lengths in (("mixed", (9, 14, 17)), ("packable", (11, 5, 24)), ("learned", (8, 13, 6))):
        d, c = write_export(mname, seed=5)
        m = load(d)
        docs = [ids_for(n, 40 + i) for i, n in enumerate(lengths)]
        flat = sum(docs, [])
        pos = torch.tensor([sum((list(range(n)) for n in lengths), [])])
        for ctx_len in ([64, None] if mname == "packable" else [64]):
            m.config.context_length = ctx_len
            with torch.no_grad():
                packed = m(torch.tensor([flat]), position_ids=pos, use_cache=False).logits[0]
            e, o = 0.0, 0
            for doc in docs:
                e = max(e, rel_err(packed[o:o + len(doc)], logits_alone(m, doc)))
                o += len(doc)
            check(f"{mname}, context_length {ctx_len}: {len(docs)} documents", e <= F32_TOL, f"{e:.1e}")
        # two packed rows with different cuts, plus a left-padded packed row
        m.config.context_length = 64
        row2 = docs[2] + docs[0]
        pos2 = list(range(len(docs[2]))) + list(range(len(docs[0])))
        pad = len(flat) - len(row2)
        batch = torch.tensor([flat, [0] * pad + row2])
        mask = torch.tensor([[1] * len(flat), [0] * pad + [1] * len(row2)])
        posb = torch.tensor([pos[0].tolist(), [0] * pad + pos2])
        with torch.no_grad():
            out = m(batch, attention_mask=mask, position_ids=posb, use_cache=False).logits
        e = max(rel_err(out[1, pad:pad + len(docs[2])], logits_alone(m, docs[2])),
                rel_err(out[1, pad + len(docs[2]):], logits_alone(m, docs[0])))
        check(f"{mname}: a batch of packed rows, one left-padded", e <= F32_TOL, f"{e:.1e}")
        # a cache continued after packed documents is refused with a clear error
        with torch.no_grad():
            first = m(torch.tensor([flat]), position_ids=pos, use_cache=True)
            try:
                m(torch.tensor([[5]]), position_ids=torch.tensor([[lengths[-1]]]), cache=first.cache, use_cache=True)
                refused = False
            except ValueError as err:
                refused = "packed documents" in str(err)
        check(f"{mname}: decoding after packed documents is refused", refused)
        m.config.context_length = None


def test_float64():
    """7. float64."""
    print("7. float64")
    for mname in ("mixed", "lampe", "packable", "learned"):
        d, c = write_export(mname, seed=6)
        m32 = load(d)
        m64 = load(d).double()
        N = 30
        ids = torch.tensor([ids_for(N, 51)])
        m64.config.context_length = N
        m32.config.context_length = N
        with torch.no_grad():
            full = m64(ids, use_cache=False).logits
        dec = decode_all(m64, ids, 6)
        e = rel_err(dec, full)
        with torch.no_grad():
            f32 = m32(ids, use_cache=False).logits
        e32 = rel_err(f32, full)
        check(f"{mname}: float64 logits, decoding vs full", full.dtype == torch.float64 and e <= F64_TOL,
              f"dtype {full.dtype}, {e:.1e}")
        check(f"{mname}: float32 vs float64", e32 <= F32_TOL, f"{e32:.1e}")
        # from_pretrained(dtype=float64) gives the same
        m64b = load(d, torch.float64)
        m64b.config.context_length = N
        with torch.no_grad():
            e2 = rel_err(m64b(ids, use_cache=False).logits, full)
        check(f"{mname}: from_pretrained(dtype=torch.float64)", e2 <= F64_TOL, f"{e2:.1e}")


def test_loss_and_config():
    """8. loss with labels; config round trip; generate from a fresh DynamicCache."""
    print("8. loss, config round trip")
    d, c = write_export("mixed", seed=7)
    m = load(d)
    ids = torch.tensor([ids_for(20, 61), ids_for(20, 62)])
    labels = ids.clone()
    labels[0, :5] = -100
    out = m(ids, labels=labels, use_cache=False)
    lg = out.logits[:, :-1].reshape(-1, VOCAB)
    want = torch.nn.functional.cross_entropy(lg, labels[:, 1:].reshape(-1), ignore_index=-100)
    check("loss = shifted mean cross-entropy ignoring -100", abs(out.loss.item() - want.item()) < 1e-5,
          f"{out.loss.item():.6f} vs {want.item():.6f}")
    out.loss.backward()
    finite = all(p.grad is None or torch.isfinite(p.grad).all() for p in m.parameters())
    check("gradients are finite (left pads included)", finite)
    mask = torch.ones_like(ids)
    mask[0, :6] = 0
    m.zero_grad()
    m(ids, attention_mask=mask, labels=labels, use_cache=False).loss.backward()
    check("gradients are finite with left padding", all(p.grad is None or torch.isfinite(p.grad).all() for p in m.parameters()))
    # round trip: every key Horizon writes comes back unchanged through save_pretrained / from_pretrained
    cfg = AutoConfig.from_pretrained(d, trust_remote_code=True)
    out_dir = os.path.join(TMP, "roundtrip")
    cfg.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "config.json")) as f:
        saved = json.load(f)
    back = AutoConfig.from_pretrained(out_dir, trust_remote_code=True)
    keys = [k for k in c if k not in ("torch_dtype",)]
    bad = [k for k in keys if getattr(back, k) != c[k] or getattr(cfg, k) != c[k]]
    check("config.json round-trips every key", not bad and str(back.dtype) == "torch.float32", f"differ: {bad}")
    check("saved config keeps layer_kinds / pattern / overrides", saved.get("layer_kinds") == c["layer_kinds"]
          and saved.get("layer_pattern") == c["layer_pattern"] and saved.get("layer_overrides") == c["layer_overrides"])
    try:
        bad_cfg = dict(c, layer_kinds={"x": dict(KIND_DEFAULTS, windw=3)}, layer_pattern=["x"], layer_overrides={})
        type(cfg)(**{k: v for k, v in bad_cfg.items() if k not in ("architectures", "model_type", "auto_map")})
        refused = False
    except ValueError as err:
        refused = "windw" in str(err)
    check("an unknown layer-kind field is refused by name", refused)
    # each value is checked against its field's range, type or names from horizon_fields.json
    for field, value, words in (("chunk", -1, "in [0, 16777216]"), ("swan_a", 1.0, "> 1"), ("rope_fraction", 1.5, "in [0, 1]"),
                                ("window", 2.5, "an integer"), ("scopes", [4, 0], ">= 1"), ("gate", "row", "element"),
                                ("rope_base", float("inf"), "> 0"), ("sink", 1, "true or false")):
        try:
            bad_cfg = dict(c, layer_kinds={"x": dict(KIND_DEFAULTS, **{field: value})}, layer_pattern=["x"],
                           layer_overrides={})
            type(cfg)(**{k: v for k, v in bad_cfg.items() if k not in ("architectures", "model_type", "auto_map")})
            msg = ""
        except ValueError as err:
            msg = str(err)
        check(f"{field} = {value!r} is refused with the field's name and range", f"layer_kinds.x.{field}" in msg
              and words in msg, msg or "accepted")
    # the saved copy carries the field table beside config.json (the module cache holds only the .py files)
    check("save_pretrained writes horizon_fields.json beside config.json",
          os.path.isfile(os.path.join(out_dir, "horizon_fields.json")))
    tied = m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    check("tie_word_embeddings ties lm_head to embed_tokens", tied)
    d2, _ = write_export("lampe", seed=7)
    m2 = load(d2)
    untied = m2.lm_head.weight.data_ptr() != m2.model.embed_tokens.weight.data_ptr()
    check("untied lm_head loads its own weight", untied)
    # LaMPE is really on at l > m (it changes the logits) and off at l <= m (m = L / (1 + e^-(a l + b)) = 8.6 at l = 19)
    with torch.no_grad():
        long_ids, short_ids = torch.tensor([ids_for(19, 3)]), torch.tensor([ids_for(6, 4)])
        on_long, on_short = m2(long_ids, use_cache=False).logits, m2(short_ids, use_cache=False).logits
        m2.config.lampe = None
        off_long, off_short = m2(long_ids, use_cache=False).logits, m2(short_ids, use_cache=False).logits
        m2.config.lampe = MODELS["lampe"]["lampe"]
    e_long, e_short = rel_err(on_long, off_long), rel_err(on_short, off_short)
    check("LaMPE changes the logits at l > m and not at l <= s_local + s_sink", e_long > 1e-3 and e_short < 1e-6,
          f"{e_long:.1e} / {e_short:.1e}")
    # LaMPE on a layer with LogN / SSMax, sinks or FoX is refused (Horizon's LaMPE refuses them)
    lk = copy.deepcopy(MODELS["lampe"]["layer_kinds"])
    lk["rope_si"].update(logit="logn")
    d3, _ = write_export("lampe", seed=7, layer_kinds=lk)
    try:
        with torch.no_grad():
            load(d3)(torch.tensor([ids_for(8, 1)]), use_cache=False)
        refused = False
    except NotImplementedError as err:
        refused = "LaMPE" in str(err)
    check("LaMPE on an SSMax layer is refused with a clear error", refused)
    # a DynamicCache made by the caller (with the config, as generate() makes it) works too
    from transformers import DynamicCache
    ids1 = torch.tensor([ids_for(12, 71)])
    m.config.context_length = 12
    with torch.no_grad():
        full = m(ids1, use_cache=False).logits
        cache = DynamicCache(config=m.config)
        a = m(ids1[:, :8], cache=cache, use_cache=True)
        b = m(ids1[:, 8:], past_key_values=a.cache, use_cache=True)
    e = rel_err(torch.cat([a.logits, b.logits], 1), full)
    check("DynamicCache(config=...) from the caller; past_key_values= keyword", e <= F32_TOL, f"{e:.1e}")
    m.config.context_length = None


def main():
    print(f"remote code under test: {os.path.abspath(REMOTE)}")
    tests = [test_brute_force, test_frequencies_vs_transformers, test_cache_equals_full, test_generate,
             test_left_padding, test_packed, test_float64, test_loss_and_config]
    for t in tests:
        try:
            t()
        except Exception:  # a crash is a failure of that test, the others still run
            traceback.print_exc()
            check(f"{t.__name__} ran to the end", False)
    shutil.rmtree(TMP, ignore_errors=True)
    bad = [n for n, ok in RESULTS if not ok]
    print(f"{len(RESULTS)} checks, {len(bad)} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
