"""HorizonForCausalLM: a model trained by Horizon, computed in eager PyTorch.

A pre-norm decoder: h = x + Attn(RMSNorm(x)); out = h + MLP(RMSNorm(h)); logits = lm_head(RMSNorm(out)).
Each layer's attention is described by its layer kind (configuration_horizon.py). Legend: B batch,
H query heads, Hkv key/value heads (query head h reads kv head h // (H / Hkv)), D head dim, Tn the
new tokens of a call, Tk all the keys the call sees (cached + new), i a query, j a key, p_i and p_j
their positions, t = p_i - p_j their distance. The logits of one head are

    L_ij = r_i * a_t * (scale * q_i . k_j) * c_h + m_t - slope_h * t + (C_i - C_j),   scale = 1 / sqrt(D)

over the keys visible to i, and softmax runs over them plus an optional sink logit z_h (a column
that carries no value). r_i is the row factor of the logit transform (times Llama 4's position
temperature), a_t and m_t the scale-invariant terms, c_h LogN's per-head constant, slope_h ALiBi's,
C the running sum of FoX's log forget gates.

Learned angles (a RoPE layer with rope_angles accumulated, learned_freqs or rotate_v; Horizon's
attn::rotate_by_angles): pair m of q_i and k_j rotates by theta_i, theta_j (B, G, T, D/2), head h
reading group h // (n / G). Accumulated: theta_i = sum_{t <= i} w_m softplus(x_t . angle_proj)_m over
the sequence's real tokens (pads take no step); else theta_i = p_i w_m. learned_freqs multiplies them by
freq_factors (per layer or per KV head). rotate_v: v_j rotated by theta_j and the output o_i back by -theta_i.

Positions and masks follow transformers' conventions: attention_mask (B, past + new) is 0 on
(left) pads, which are never visible and count nowhere; position_ids default to cumsum(mask) - 1;
position_ids that restart (p_j != p_(j-1) + 1) start a new packed document, and a key is visible
only inside its query's document. T, the length that length-dependent terms use (SCOPE scopes,
dynamic NTK, LaMPE's l, the temperature's s), is config.context_length, or when null the number of
real keys of the sequence in the call (past + new; for the temperature the query's document's).

Attention runs on one of three paths, chosen per layer by config._attn_implementation (from_pretrained(...,
attn_implementation=...)): "eager" (the default and the reference: each head's logits written out term by term),
"sdpa" (torch's scaled_dot_product_attention, for layers whose logits are scale * q . k: the mask as is_causal or
a boolean attn_mask; other layers eager) and "flex_attention" (FlexAttention: the mask as a mask_mod over a
BlockMask, the terms as a score_mod, sinks through the log-sum-exp; LaMPE's layers eager). The mods call the
helpers the eager path uses (mask_parts_at, visible_at, distance_terms, head_logit_terms, row_factor). Gradient
checkpointing: HorizonDecoderLayer is transformers' GradientCheckpointingLayer.

The KV cache keeps keys before RoPE (they are rotated at attention time with the call's
frequencies and LaMPE map), the positions, the pad mask and FoX's log f. Decoding equals the full
forward when T is fixed (config.context_length set, as Horizon fixes T = prompt + max_new_tokens);
with context_length null and length-dependent terms, each step runs at T = the tokens so far while
the cached keys of deeper layers were computed at the T of their own step (a warning says so).
"""
import math
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.utils import logging

from .configuration_horizon import HorizonConfig

try:  # transformers 5: initialisers that leave loaded weights alone
    from transformers import initialization as hf_init
except ImportError:  # pragma: no cover
    hf_init = nn.init

try:  # FlexAttention (torch >= 2.5; the log-sum-exp through AuxRequest from 2.9)
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention
except ImportError:  # pragma: no cover
    flex_attention = None

logger = logging.get_logger(__name__)

TWO_PI = 6.283185307179586476925286766559

# The output classes name the cache `cache` in recent transformers, `past_key_values` before.
_CACHE_FIELD = "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"


def _round_half_away(x: float) -> int:
    """C's llround / std::round: halves go away from zero (Python's round() goes to even)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


# ---------------------------------------------------------------------------------------------
# Rotary frequencies
# ---------------------------------------------------------------------------------------------

def rotating_pairs(kind: Dict[str, Any], half: int) -> List[bool]:
    """Which of the D/2 frequency pairs rotate (partial RoPE / HoPE).

    rope_pairs lists them (pair 0 the fastest); otherwise keep = round(rope_fraction * D/2) pairs:
    high = pairs 0..keep-1, low = the last keep pairs, uniform = pair floor(k * half / keep), k < keep.
    """
    if kind["rope_pairs"]:
        on = [False] * half
        for m in kind["rope_pairs"]:
            if not 0 <= int(m) < half:
                raise ValueError(f"rope_pairs lists pair {m}; head_dim has pairs 0..{half - 1}")
            on[int(m)] = True
        return on
    keep = _round_half_away(kind["rope_fraction"] * half)
    if keep >= half:
        return [True] * half
    on = [False] * half
    for k in range(keep):
        if kind["rope_select"] == "high":
            on[k] = True
        elif kind["rope_select"] == "low":
            on[half - 1 - k] = True
        else:
            on[(k * half) // keep] = True
    return on


def rope_frequencies(kind: Dict[str, Any], D: int, T: int, train_length: int) -> Tuple[List[float], float]:
    """Angular frequencies w_m (m < D/2, 0 = the pair does not rotate) and the cos/sin multiplier.

    rope:  w_m = base^(-2m/D), then the scaling with factor s and C = C_train (rope_original_context,
           else train_length, else T):
      pi           w_m / s
      ntk          base' = base * s^(D/(D-2))
      dynamic_ntk  the same with s_T = factor * T/C - (factor - 1) when T > C, else 1
      yarn         w'_m = (1 - k_m) w_m / s + k_m w_m, cos/sin times mscale = yarn_mscale or 0.1 ln s + 1,
                   k_m the share kept:  ramp "rotations": clamp((r_m - alpha) / (beta - alpha), 0, 1),
                   r_m = C w_m / (2 pi);  ramp "index": 1 - clamp((m - lo) / (hi - lo), 0, 1),
                   lo / hi = D ln(C / (2 pi beta|alpha)) / (2 ln base), floor / ceil when yarn_truncate,
                   clamped to [0, D - 1] (hi += 0.001 when equal)
      llama3       the rotations ramp with alpha, beta = low / high_freq_factor, no mscale
      longrope     w_m / lambda_m, lambda = longrope_long_factors when T > C, else longrope_short_factors
                   (none: 1); cos/sin times yarn_mscale or sqrt(1 + ln s / ln C) when s > 1
    prope: keep = max(1, round(prope_fraction D/2)) pairs, w_m = base_eff^(-m / (keep - 1)) (1 if keep = 1).
    Then pairs left out by rope_pairs / rope_fraction get 0 and rope_freq_factors multiply: w_m *= f_m.
    """
    half = D // 2
    inv = [0.0] * half
    mscale = 1.0
    if kind["pos"] == "prope":
        keep = max(1, _round_half_away(kind["prope_fraction"] * half))
        for m in range(keep):
            inv[m] = 1.0 if keep == 1 else math.pow(kind["prope_base_eff"], -float(m) / (keep - 1))
    elif kind["pos"] == "rope":
        base = float(kind["rope_base"])
        s = float(kind["rope_factor"])
        scaling = kind["rope_scaling"]
        c_train = kind["rope_original_context"] or train_length or T
        if scaling == "dynamic_ntk":
            r = T / c_train
            s = s * r - (s - 1.0) if r > 1.0 else 1.0
        if scaling in ("ntk", "dynamic_ntk") and s > 1.0:
            base = base * math.pow(s, D / (D - 2))
        inv = [math.pow(base, -2.0 * m / D) for m in range(half)]
        if scaling == "longrope":
            lam = kind["longrope_long_factors"] if T > c_train else kind["longrope_short_factors"]
            if lam:
                if len(lam) != half:
                    raise ValueError(f"longrope factors: {len(lam)} values; head_dim {D} has {half} pairs")
                inv = [w / float(x) for w, x in zip(inv, lam)]
            if s > 1.0:
                mscale = kind["yarn_mscale"] if kind["yarn_mscale"] > 0 else math.sqrt(1.0 + math.log(s) / math.log(c_train))
        elif scaling == "pi" and s > 1.0:
            inv = [w / s for w in inv]
        elif scaling in ("yarn", "llama3") and s > 1.0:
            llama3 = scaling == "llama3"
            alpha = kind["llama3_low_freq_factor"] if llama3 else kind["yarn_alpha"]
            beta = kind["llama3_high_freq_factor"] if llama3 else kind["yarn_beta"]
            if not llama3 and kind["yarn_ramp"] == "index":
                def pair_of(rotations):  # the (fractional) pair index making `rotations` turns over C
                    return D * math.log(c_train / (rotations * TWO_PI)) / (2.0 * math.log(kind["rope_base"]))
                lo, hi = pair_of(beta), pair_of(alpha)
                if kind["yarn_truncate"]:
                    lo, hi = math.floor(lo), math.ceil(hi)
                lo, hi = max(lo, 0.0), min(hi, float(D - 1))
                if lo == hi:
                    hi += 0.001
                keep = [1.0 - min(max((m - lo) / (hi - lo), 0.0), 1.0) for m in range(half)]
            else:
                keep = [min(max((c_train * w / TWO_PI - alpha) / (beta - alpha), 0.0), 1.0) for w in inv]
            inv = [(1.0 - k) * w / s + k * w for k, w in zip(keep, inv)]
            if not llama3:
                mscale = kind["yarn_mscale"] if kind["yarn_mscale"] > 0 else 0.1 * math.log(s) + 1.0
    else:
        return inv, 1.0  # none / alibi: no rotation
    if kind["rope_pairs"] or kind["rope_fraction"] < 1.0:
        on = rotating_pairs(kind, half)
        inv = [w if o else 0.0 for w, o in zip(inv, on)]
    factors = kind["rope_freq_factors"]
    if factors:
        if len(factors) != half:
            raise ValueError(f"rope_freq_factors has {len(factors)} values; head_dim {D} has {half} pairs")
        inv = [w * float(f) for w, f in zip(inv, factors)]
    return inv, mscale


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, mscale: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_m, x_(m+D/2)) by angle p * w_m (rotate_half layout), times mscale:
        x_m' = (x_m cos - x_(m+D/2) sin) mscale,   x_(m+D/2)' = (x_m sin + x_(m+D/2) cos) mscale.
    x (B, n, T, D); positions (B, T); inv_freq (B, D/2) and mscale (B) in float64 (angles, cos and sin
    are computed in float64, then cast to x's dtype)."""
    angle = positions.to(torch.float64)[:, :, None] * inv_freq[:, None, :]  # (B, T, D/2)
    cos = (torch.cos(angle) * mscale[:, None, None]).to(x.dtype)[:, None]
    sin = (torch.sin(angle) * mscale[:, None, None]).to(x.dtype)[:, None]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def rotate_by_angles(x: torch.Tensor, theta: torch.Tensor, mscale: Optional[torch.Tensor] = None,
                     inverse: bool = False) -> torch.Tensor:
    """Rotate pairs (x_m, x_(m+D/2)) of x (B, n, T, D) by the angles theta (B, G, T, D/2) float64, head h reading
    group h // (n / G); minus the angles when inverse; times mscale (B) when given (Horizon's attn::rotate_by_angles).
    cos and sin are computed in float64, then cast to x's dtype."""
    a = theta.repeat_interleave(x.shape[1] // theta.shape[1], dim=1)
    cos, sin = torch.cos(a), torch.sin(a)
    if inverse:
        sin = -sin
    if mscale is not None:
        cos, sin = cos * mscale[:, None, None, None], sin * mscale[:, None, None, None]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


# ---------------------------------------------------------------------------------------------
# Masks and logit terms
# ---------------------------------------------------------------------------------------------

def scope_windows(H: int, T: int, gamma: float = 0.0, min_scope: int = 1, max_scope: int = 0) -> List[int]:
    """SCOPE: head h = 1..H sees the S_h most recent keys (itself included), S_h = ceil(gamma^h),
    gamma = T^(1/H) unless given, clamped to [min_scope, max_scope] (max 0 = T). A gamma^h within 1e-9
    (relative) of an integer is that integer."""
    if max_scope <= 0:
        max_scope = T
    if gamma <= 0:
        gamma = math.pow(float(T), 1.0 / H)
    out = []
    for h in range(1, H + 1):
        g = math.pow(gamma, float(h))
        r = float(_round_half_away(g))
        v = int(r) if abs(g - r) <= 1e-9 * max(1.0, r) else int(math.ceil(g))
        out.append(min(max(v, min_scope), max_scope))
    return out


def layer_windows(kind: Dict[str, Any], H: int, T: int, train_length: int) -> List[int]:
    """One window per query head (0 = unbounded): causal 0, window W, SCOPE scopes for length T
    (the training length when freeze_scopes); a window W shows a query itself and the W-1 keys before it (t < W)."""
    if kind["mask"] == "causal":
        return [0] * H
    if kind["mask"] == "window":
        return [int(kind["window"])] * H
    if kind["scopes"]:
        if len(kind["scopes"]) != H:
            raise ValueError(f"{len(kind['scopes'])} explicit SCOPE scopes for {H} query heads; give one per head")
        return [int(s) for s in kind["scopes"]]
    t = train_length if kind["freeze_scopes"] and train_length > 0 else T
    return scope_windows(H, t, float(kind["scope_gamma"]), int(kind["scope_min"]), int(kind["scope_max"]))


def alibi_slopes(H: int) -> List[float]:
    """ALiBi: slope_h = 2^(-8h/H), h = 1..H; the logits gain -slope_h * t."""
    return [math.pow(2.0, -8.0 * h / H) for h in range(1, H + 1)]


# The mask and logit helpers below are what tests/hf/oracle_test.py holds to attention's float64 oracle
# table (tests/fixtures/attention_oracle.json), case by case. ctx is a call's context (HorizonModel._context).

def mask_parts_at(kind: Dict[str, Any], q_pos, k_pos, same_doc):
    """mask_parts at broadcastable positions q_pos, k_pos (a FlexAttention mask_mod passes scalars; same_doc
    is read only with a prefix, and may be a callable that makes it)."""
    C, S, P = int(kind["chunk"]), int(kind["sink_tokens"]), int(kind["prefix"])
    chunked = (q_pos // C == k_pos // C) if C > 0 else True
    sinks = k_pos < S if S > 0 else False
    if P > 0:
        prefix = (same_doc() if callable(same_doc) else same_doc) & (q_pos < P) & (k_pos < P)
    else:
        prefix = False
    return chunked, sinks, prefix


def mask_parts(kind: Dict[str, Any], ctx: Dict[str, Any]):
    """The parts of a layer's mask that no head changes, each (B, Tn, Tk) bool or a constant:
    chunked attention (Llama 4): keys in the query's chunk of C positions, floor(p_j / C) = floor(p_i / C)
    (positions count from each document's start, as transformers' packing gives them);
    sink tokens (StreamingLLM): the document's first S positions stay visible beside the window and chunk;
    prefix-LM: a document's first P positions attend to each other in both directions (ALiBi and
    scale-invariant read |t|)."""
    return mask_parts_at(kind, ctx["q_pos"][:, :, None], ctx["k_pos"][:, None, :], lambda: ctx["same_doc"])


def visible_at(visible, t, w_h, parts):
    """head_visible at broadcastable operands: visible (a real key of the query's document, not after it),
    t = p_i - p_j, the head's window w_h (0 = unbounded) and mask_parts."""
    chunked, sinks, prefix = parts
    return (visible & ((((w_h == 0) | (t < w_h)) & chunked) | sinks)) | prefix


def head_visible(ctx: Dict[str, Any], parts, w_h: torch.Tensor) -> torch.Tensor:
    """The keys each query of one head sees (B, Tn, Tk): a real key of the query's document, not after it,
    with t < W_h when W_h > 0 (w_h (B, 1, 1)) and in the query's chunk; or a sink token; or both in the prefix."""
    return visible_at(ctx["visible"], ctx["t"], w_h, parts)


def row_factor(kind: Dict[str, Any], ctx: Dict[str, Any], n_visible: torch.Tensor, train_length: int) -> torch.Tensor:
    """r_i of one head (float64, broadcastable to (B, Tn, Tk)) without LogN's c_h; P_i the query's position."""
    p = ctx["q_pos"].to(torch.float64)[:, :, None]  # (B, Tn, 1)
    logit = kind["logit"]
    if logit == "logn":
        # SSMax: r = ln(n_i), n_i the keys row i sees (its window, scope, document);
        # LogN by position (logn_position): n_i = P_i + 1. r = 0 when n = 0.
        n = p + 1.0 if kind["logn_position"] else n_visible.to(torch.float64)
        r = torch.where(n > 0, torch.log(n.clamp(min=1.0)), torch.zeros_like(n))
    elif logit == "swan_row":
        # SWAN: g(P_i) = ln(a + P_i) / ln(a)
        a = float(kind["swan_a"])
        r = torch.log(a + p) / math.log(a)
    elif logit == "temperature":
        # DroPE: r = beta, or with temp_c: 1 + c ln s when s = T / train_length > 1 (else 1), T the
        # query's document's length (context_length when set)
        if kind["temp_c"] != 0.0:
            L = train_length
            T_doc = ctx["T_doc"].to(torch.float64)[:, :, None]
            s = T_doc / L if L and L > 0 else torch.ones_like(T_doc)
            r = torch.where(s > 1.0, 1.0 + kind["temp_c"] * torch.log(s.clamp(min=1.0)), torch.ones_like(s))
        else:
            r = torch.full_like(p, float(kind["beta"]))
    else:
        r = torch.ones_like(p)
    if kind["qtemp_alpha"] != 0.0:
        # Llama 4: r *= 1 + alpha ln(floor((P_i + 1) / beta) + 1)
        steps = torch.floor((p + 1.0) / float(kind["qtemp_beta"]))
        r = r * (1.0 + kind["qtemp_alpha"] * torch.log(steps + 1.0))
    return r


def distance_terms(kind: Dict[str, Any], t: torch.Tensor):
    """|t| (float64; a prefix's later keys read the distance both ways) and the scale-invariant terms
    a_t = sqrt(2 ln(1 + t/tau) + 1), m_t = -2 ln(1 + t/tau) at |t| (None for other logits)."""
    tt = t.abs().to(torch.float64)
    a_t = m_t = None
    if kind["logit"] == "scale_invariant":
        lg = torch.log1p(tt / float(kind["tau"]))
        a_t, m_t = torch.sqrt(2.0 * lg + 1.0), -2.0 * lg
    return tt, a_t, m_t


def head_logit_terms(r: torch.Tensor, a_t, m_t, tt: torch.Tensor, slope: Optional[float]):
    """One head's L = coef * s * c_h + bias: coef = r_i a_t, bias = m_t - slope_h |t| (ALiBi); bias None when 0."""
    coef, bias = r, None
    if a_t is not None:
        coef, bias = coef * a_t, m_t
    if slope is not None:
        # ALiBi: -slope_h * t
        bias = -slope * tt if bias is None else bias - slope * tt
    return coef, bias


class HorizonRMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * w."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class HorizonMLP(nn.Module):
    """silu (SwiGLU): down(silu(gate x) * up x);  relu2: down(relu(up x)^2);  gelu: down(gelu_erf(up x))."""

    def __init__(self, config: HorizonConfig):
        super().__init__()
        C, Fh = config.hidden_size, config.intermediate_size
        self.act = config.hidden_act
        if self.act == "silu":
            self.gate_proj = nn.Linear(C, Fh, bias=False)
        self.up_proj = nn.Linear(C, Fh, bias=False)
        self.down_proj = nn.Linear(Fh, C, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act == "silu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        if self.act == "relu2":
            return self.down_proj(torch.relu(self.up_proj(x)).square())
        return self.down_proj(F.gelu(self.up_proj(x), approximate="none"))


# ---------------------------------------------------------------------------------------------
# The KV cache
# ---------------------------------------------------------------------------------------------

class HorizonCacheLayer(DynamicLayer):
    """One layer's cache: keys before RoPE (B, Hkv, Tk, D), values (before rotate_v's rotation), and beside
    them the keys' positions (B, Tk), which of them are real tokens (B, Tk; pads are not), FoX's log f (B, H, Tk),
    the learned angles' sums before the frequency factors (B, G, D/2, Tk; the tokens last as the others) and
    GRAPE-A's key rates dist_k (B, H, Tk)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.positions: Optional[torch.Tensor] = None
        self.valid: Optional[torch.Tensor] = None
        self.log_f: Optional[torch.Tensor] = None
        self.angles: Optional[torch.Tensor] = None
        self.dist_k: Optional[torch.Tensor] = None

    def append(self, k, v, positions, valid, log_f, angles=None, dist_k=None):
        """Stores the new tokens' entries; returns every key, value, log f, angle sum and key rate (None without
        them)."""
        if not self.is_initialized or self.keys is None or self.keys.dim() != 4:
            self.device = k.device
            self.keys, self.values = k, v
            self.positions, self.valid, self.log_f = positions, valid, log_f
            self.angles, self.dist_k = angles, dist_k
            self.is_initialized = True
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
            self.positions = torch.cat([self.positions, positions], dim=-1)
            self.valid = torch.cat([self.valid, valid], dim=-1)
            if log_f is not None:
                self.log_f = torch.cat([self.log_f, log_f], dim=-1)
            if angles is not None:
                self.angles = torch.cat([self.angles, angles], dim=-1)
            if dist_k is not None:
                self.dist_k = torch.cat([self.dist_k, dist_k], dim=-1)
        return self.keys, self.values, self.log_f, self.angles, self.dist_k

    def update(self, key_states, value_states, *args, **kwargs):
        raise NotImplementedError("HorizonCacheLayer is filled by HorizonForCausalLM itself (append)")

    def _each_extra(self, fn):
        for name in ("positions", "valid", "log_f", "angles", "dist_k"):
            t = getattr(self, name)
            if t is not None:
                setattr(self, name, fn(t))

    def reset(self) -> None:
        self.positions = self.valid = self.log_f = self.angles = self.dist_k = None
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            # legacy meaning: the length to keep
            tokens_to_remove = tokens_to_remove - self.get_seq_length()
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        n = abs(tokens_to_remove)
        self.keys, self.values = self.keys[..., :-n, :], self.values[..., :-n, :]
        self._each_extra(lambda t: t[..., :-n])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.get_seq_length() > 0:
            super().reorder_cache(beam_idx)
            self._each_extra(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            super().batch_repeat_interleave(repeats)
            self._each_extra(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            super().batch_select_indices(indices)
            self._each_extra(lambda t: t[indices, ...])


def _horizon_cache_layer(cache: Cache, idx: int) -> HorizonCacheLayer:
    """Layer idx of `cache` as a HorizonCacheLayer (a fresh DynamicCache's empty layers are replaced)."""
    if not isinstance(cache, Cache):
        raise TypeError(f"HorizonForCausalLM takes a transformers Cache (e.g. DynamicCache()), got {type(cache).__name__}")
    while len(cache.layers) <= idx:
        cache.layers.append(HorizonCacheLayer())
    layer = cache.layers[idx]
    if not isinstance(layer, HorizonCacheLayer):
        if getattr(layer, "is_initialized", False) and layer.get_seq_length() > 0:
            raise ValueError("this cache holds keys that HorizonForCausalLM did not write; start from an empty DynamicCache")
        layer = HorizonCacheLayer()
        cache.layers[idx] = layer
    return layer


_COMPILED_FLEX = None


def _compiled_flex_attention():
    """torch.compile(flex_attention), made once (transformers' WrappedFlexAttention does the same)."""
    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        _COMPILED_FLEX = torch.compile(flex_attention)
    return _COMPILED_FLEX


def _flex_compiles(config, q: torch.Tensor, need_lse: bool) -> bool:
    """Whether the flex path runs compiled (the fused kernel that never holds a (Tn, Tk) table) or eagerly (torch
    evaluates the mods over the whole table: exact, slower, as much memory as eager). config.flex_compile: None
    (default) compiles on a GPU only; True compiles where torch 2.15 can: on a GPU always, on the CPU for inference
    (no gradients) in float32 / bf16 / fp16 without the log-sum-exp (a layer with sinks runs uncompiled); False never."""
    choice = getattr(config, "flex_compile", None)
    if choice is False or (choice is None and not q.is_cuda):
        return False
    if q.is_cuda:
        return True
    return (not (torch.is_grad_enabled() and q.requires_grad) and not need_lse
            and q.dtype in (torch.float32, torch.bfloat16, torch.float16))


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------

class HorizonAttention(nn.Module):
    def __init__(self, config: HorizonConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.kind = config.layer_kind(layer_idx)
        C, H, Hkv, D = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
        # DIFF Transformer V2: Ha = 2H query heads, the pair (2h, 2h+1) in one GQA group; output head
        # h = A_2h V - sigmoid(x . w_h) A_2h+1 V (lambda_proj: one lambda per token and output head)
        Ha = 2 * H if self.kind["diff"] else H
        self.H, self.Ha, self.Hkv, self.D = H, Ha, Hkv, D
        if self.kind["pos"] in ("rope", "prope") and D % 2:
            raise ValueError(f"layer {layer_idx}: RoPE rotates pairs, so head_dim ({D}) must be even")
        self.q_proj = nn.Linear(C, Ha * D, bias=config.attention_bias)
        self.k_proj = nn.Linear(C, Hkv * D, bias=config.attention_bias)
        self.v_proj = nn.Linear(C, Hkv * D, bias=config.attention_bias)
        self.o_proj = nn.Linear(H * D, C, bias=False)
        # QK-norm (RMSNorm, eps 1e-6): "full" over the whole projection before splitting heads, "per_head" over D
        if self.kind["qk_norm"] == "full":
            self.q_norm, self.k_norm = HorizonRMSNorm(Ha * D, 1e-6), HorizonRMSNorm(Hkv * D, 1e-6)
        elif self.kind["qk_norm"] == "per_head":
            self.q_norm, self.k_norm = HorizonRMSNorm(D, 1e-6), HorizonRMSNorm(D, 1e-6)
        # gated attention: o <- o * sigmoid(x W_g^T), one gate per head (H, C) or per element (H*D, C)
        if self.kind["gate"] != "none":
            self.gate_proj = nn.Linear(C, H if self.kind["gate"] == "head" else H * D, bias=False)
        if self.kind["diff"]:
            self.lambda_proj = nn.Linear(C, H, bias=False)
        # LogN's c_h: a learned scalar per (attention) head, or the constant logn_c
        if self.kind["logit"] == "logn" and self.kind["logn_learnable"]:
            self.logn_c = nn.Parameter(torch.full((Ha,), float(self.kind["logn_c"])))
        # attention sinks: a logit z_h per head in every row's softmax denominator
        if self.kind["sink"]:
            self.sinks = nn.Parameter(torch.zeros(Ha))
        # FoX: log f = log sigmoid(x w_h + b_h) per head and token
        if self.kind["forget"]:
            self.forget_proj = nn.Linear(C, Ha, bias=True)
        # learned angles (rotate_by_angles): accumulated steps softplus(x . angle_proj) per pair, G = 1 or Hkv
        # (angles_per_head); GRAPE-M's trained frequency factors per layer or per KV head (flat, G D/2)
        k = self.kind
        self.learned_angles = k["pos"] == "rope" and (
            k["rope_angles"] == "accumulated" or k["rotate_v"] or k["learned_freqs"] != "none")
        if k["pos"] == "rope" and k["rope_angles"] == "accumulated":
            self.angle_proj = nn.Linear(C, (Hkv if k["angles_per_head"] else 1) * (D // 2), bias=True)
        if k["pos"] == "rope" and k["learned_freqs"] != "none":
            self.freq_factors = nn.Parameter(torch.ones((Hkv if k["learned_freqs"] == "head" else 1) * (D // 2)))
        # ALiBi as the position encoding or beside another one (additive: alibi, GRAPE's fixed-rate form)
        self.slopes = alibi_slopes(H) if self.kind["pos"] == "alibi" or self.kind["additive"] == "alibi" else None
        if self.slopes is not None and Ha != H:  # the pair shares its output head's slope
            self.slopes = [s for s in self.slopes for _ in range(2)]
        # GRAPE-A (additive key / query / query_key): the gates' directions u (keys), v (queries) (Ha, D) and w (Ha),
        # omega_h = softplus(w_h) * slope_h; w a parameter when additive_learned_slope, else the constant ln(e - 1)
        add = self.kind["additive"]
        self.rates = add in ("key", "query", "query_key")
        if self.rates:
            if add != "query":
                self.additive_u = nn.Parameter(torch.empty(Ha, D))
            if add != "key":
                self.additive_v = nn.Parameter(torch.empty(Ha, D))
            if self.kind["additive_learned_slope"]:
                self.additive_w = nn.Parameter(torch.full((Ha,), math.log(math.e - 1.0)))
            self.rate_slopes = [s for s in alibi_slopes(H) for _ in range(Ha // H)]

    def depends_on_length(self) -> bool:
        """Whether the layer's logits depend on T (so cached decoding equals a full forward only at a fixed T)."""
        k, L = self.kind, self.config.train_length
        return bool(
            (k["mask"] == "scope" and not k["scopes"] and not (k["freeze_scopes"] and L))
            or (k["pos"] == "rope" and k["rope_scaling"] in ("dynamic_ntk", "longrope"))
            or (k["pos"] == "rope" and k["rope_scaling"] in ("yarn", "llama3") and not (k["rope_original_context"] or L))
            or (k["logit"] == "temperature" and k["temp_c"] != 0.0)
            or (k["pos"] == "rope" and k["mask"] == "causal" and self.config.lampe is not None))

    # -- per-call tables ----------------------------------------------------------------------

    def _frequencies(self, T_rows: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
        """inv_freq (B, D/2) and mscale (B), float64, for each sequence's length T."""
        kind = self.kind
        if kind["pos"] == "rope" and kind["learned_freqs"] != "none":  # the trained factors replace the fixed ones
            kind = dict(kind, rope_freq_factors=[])
        table = {T: rope_frequencies(kind, self.D, T, self.config.train_length) for T in set(T_rows)}
        inv = torch.tensor([table[T][0] for T in T_rows], dtype=torch.float64)
        ms = torch.tensor([table[T][1] for T in T_rows], dtype=torch.float64)
        return inv, ms

    def _lampe_positions(self, ctx, cfg):
        """LaMPE: for input length l, mapping length m = L / (1 + exp(-(a l + b))), rho =
        min(1, max(0, (m - s_local - s_sink) / (l - s_local - s_sink))) (1 when l <= s_local + s_sink),
        M = floor(m) + 1. Key j (its position) of the query at position p falls in one region, each
        with its own rotary positions:
            local  t < s_local:               q at p,                                  k at j
            sink   j < s_sink, t >= s_local:  q at min(p, M),                          k at j
            middle j >= s_sink, t >= s_local: q at s_local + floor((p - s_local) rho), k at floor(j rho)
        Returns the query positions of the three regions, the middle's key positions and the region
        of each (query, key) (B, Tn, Tk): 0 local, 1 sink, 2 middle."""
        s_local, s_sink = int(cfg["s_local"]), int(cfg["s_sink"])
        if s_local < 1 or s_sink < 0 or cfg["L"] <= 0:
            raise ValueError("lampe: need s_local >= 1, s_sink >= 0 and L > 0")
        rho, Mx = [], []
        for l in ctx["T_rows"]:
            m = cfg["L"] / (1.0 + math.exp(-(cfg["a"] * l + cfg["b"])))
            span = float(l - s_local - s_sink)
            rho.append(min(1.0, max(0.0, (m - s_local - s_sink) / span)) if span > 0 else 1.0)
            Mx.append(int(math.floor(m)) + 1)
        p, j = ctx["q_pos"], ctx["k_pos"]
        rho = torch.tensor(rho, dtype=torch.float64, device=p.device)[:, None]
        Mx = torch.tensor(Mx, dtype=torch.long, device=p.device)[:, None]
        q_sink = torch.minimum(p, Mx)
        q_mid = s_local + torch.floor((p - s_local).to(torch.float64) * rho).long()
        k_mid = torch.floor(j.to(torch.float64) * rho).long()
        region = torch.where(ctx["t"] < s_local, 0, torch.where(j[:, None, :] < s_sink, 1, 2))
        return (p, q_sink, q_mid), k_mid, region

    # -- which path attends --------------------------------------------------------------------

    def score_terms(self) -> List[str]:
        """The terms of the layer's logits beyond scale * q . k: what SDPA cannot take."""
        k, out = self.kind, []
        if k["pos"] == "alibi" or k["additive"] == "alibi":
            out.append("ALiBi")
        if k["logit"] != "identity":
            out.append(f"logit {k['logit']}")
        if k["qtemp_alpha"] != 0.0:
            out.append("Llama 4's qtemp")
        if k["forget"]:
            out.append("FoX forget gates")
        if self.rates:
            out.append("GRAPE-A's gated rates")
        if k["sink"]:
            out.append("attention sinks")
        return out

    def _uses_lampe(self) -> bool:
        """LaMPE (config.lampe) applies to RoPE layers (pos rope) with every window unbounded, no chunks, no prefix."""
        k = self.kind
        return (k["pos"] == "rope" and k["mask"] == "causal" and int(k["chunk"]) == 0 and int(k["prefix"]) == 0
                and self.config.lampe_settings() is not None)

    def attention_path(self) -> Tuple[str, str]:
        """(path, why) under config._attn_implementation: the path that attends ("eager", "sdpa" or
        "flex_attention") and, when it is not the requested one, why (else "")."""
        want = getattr(self.config, "_attn_implementation", None) or "eager"
        if want == "eager":
            return "eager", ""
        if want not in ("sdpa", "flex_attention"):
            raise ValueError(f"attn_implementation {want!r}: HorizonForCausalLM attends through 'eager', 'sdpa' or "
                             "'flex_attention'")
        if self._uses_lampe():
            return "eager", "LaMPE rotates q and k at each region's positions (three dot products per pair)"
        if want == "sdpa" and self.score_terms():
            return "eager", f"SDPA takes no score terms ({', '.join(self.score_terms())})"
        return want, ""

    # -- forward: project, position terms, attention by path, output ---------------------------

    def forward(self, x: torch.Tensor, ctx: Dict[str, Any], cache_layer: Optional[HorizonCacheLayer]) -> torch.Tensor:
        q, k, v, log_f, angles, rates = self._project(x, ctx, cache_layer)
        W = self._windows(ctx, x.device)
        if angles is not None:  # learned angles: theta (B, G, Tk, D/2) of every key, the queries' the last Tn
            if self.config.lampe_settings() is not None and self._uses_lampe():
                raise NotImplementedError(f"layer {self.layer_idx}: LaMPE remaps fixed RoPE positions and takes no "
                                          "learned angles (Horizon refuses it too); set config.lampe = None")
            theta = angles.transpose(-1, -2)
            if self.kind["learned_freqs"] != "none":
                theta = theta * self.freq_factors.to(torch.float64).view(1, -1, 1, self.D // 2)
            theta_q = theta[:, :, theta.shape[2] - q.shape[2]:]
            _, mscale = self._frequencies(ctx["T_rows"])
            mscale = mscale.to(q.device)
            q, k, lampe = rotate_by_angles(q, theta_q, mscale), rotate_by_angles(k, theta, mscale), None
            if self.kind["rotate_v"]:
                v = rotate_by_angles(v, theta)
        else:
            q, k, lampe = self._rotate(q, k, ctx, W)
        path, why = self.attention_path()
        if path == "flex_attention" and not q.is_cuda and torch.is_grad_enabled() and q.requires_grad:
            path, why = "eager", "FlexAttention has no backward on the CPU in torch 2.15 (a call that needs gradients)"
        if why:
            name = self.config.layer_kind_name(self.layer_idx)
            logger.warning_once(f"HorizonForCausalLM: layer {self.layer_idx} (kind {name!r}) attends through {path}, "
                                f"not {self.config._attn_implementation}: {why}")
        self.last_path = path  # the path of the latest call (an attribute for callers and tests)
        if path == "sdpa":
            y = self._attend_sdpa(q, k, v, ctx, W)
        elif path == "flex_attention":
            y = self._attend_flex(q, k, v, log_f, ctx, W, rates)
        else:
            y = self._attend_eager(q, k, v, log_f, ctx, W, lampe, rates)
        if angles is not None and self.kind["rotate_v"]:  # o_i back by -theta_i, before DIFF's pairs and the gate
            y = rotate_by_angles(y.transpose(1, 2), theta_q, inverse=True).transpose(1, 2)
        return self._output(x, y)

    def _rates(self, q, k):
        """GRAPE-A's rates from q (B, Ha, Tn, D) and k (B, Hkv, Tn, D) after QK-norm, before any rotation:
        dist_q (B, Ha, Tn), dist_k (B, Ha, Tn) (None where the kind has none), float32 for half inputs:
        omega_h softplus(unit(v_h) . q_i / sqrt(D)) and omega_h softplus(unit(u_h) . k_j / sqrt(D))."""
        if not self.rates:
            return None, None
        fd = torch.float32 if q.dtype in (torch.bfloat16, torch.float16) else q.dtype
        Ha, D = self.Ha, self.D
        w = self.additive_w.to(fd) if self.kind["additive_learned_slope"] else torch.full(
            (Ha,), math.log(math.e - 1.0), dtype=fd, device=q.device)
        omega = -F.logsigmoid(-w) * torch.tensor(self.rate_slopes, dtype=fd, device=q.device)

        def rate(heads, direction):
            d = direction.to(fd)
            unit = d * torch.rsqrt((d * d).sum(-1, keepdim=True) + 1e-12)  # u / |u| (0 stays 0)
            s = (heads.to(fd) * unit[None, :, None, :]).sum(-1) / math.sqrt(D)
            return -F.logsigmoid(-s) * omega[None, :, None]  # softplus

        dq = rate(q, self.additive_v) if hasattr(self, "additive_v") else None
        dk = rate(k.repeat_interleave(Ha // self.Hkv, dim=1), self.additive_u) if hasattr(self, "additive_u") else None
        return dq, dk

    def _project(self, x, ctx, cache_layer):
        """q (B, H, Tn, D), k and v (B, Hkv, Tk, D) with the cached keys before them (keys before RoPE), FoX's log f
        (B, H, Tk) or None, the learned angles' sums before the frequency factors (B, G, D/2, Tk) or None, and
        GRAPE-A's rates (dist_q (B, H, Tn), dist_k (B, H, Tk)) or None."""
        B, Tn, _ = x.shape
        H, Hkv, D, kind = self.Ha, self.Hkv, self.D, self.kind
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if kind["qk_norm"] == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, Tn, H, D).transpose(1, 2)
        k = k.view(B, Tn, Hkv, D).transpose(1, 2)
        v = v.view(B, Tn, Hkv, D).transpose(1, 2)
        if kind["qk_norm"] == "per_head":
            q, k = self.q_norm(q), self.k_norm(k)
        log_f = None
        if kind["forget"]:
            # FoX: log f_m = log sigmoid(x_m . w_h + b_h); pads forget nothing (log f = 0)
            log_f = F.logsigmoid(self.forget_proj(x)).transpose(1, 2)  # (B, H, Tn)
            log_f = log_f.masked_fill(~ctx["q_valid"][:, None, :], 0.0)
        angles = self._angle_sums(x, ctx, cache_layer) if self.learned_angles else None
        dist_q, dist_k = self._rates(q, k)
        if cache_layer is not None:
            k, v, log_f, angles, dist_k = cache_layer.append(k, v, ctx["q_pos"], ctx["q_valid"], log_f, angles,
                                                             dist_k)
        return q, k, v, log_f, angles, (dist_q, dist_k)

    def _angle_sums(self, x, ctx, cache_layer):
        """The new tokens' angles before the frequency factors (B, G, D/2, Tn) float64: accumulated, the running sum
        of delta_t = w softplus(x_t . angle_proj) continuing the cached total (pads take no step: the angle between
        two real tokens sums only the steps between them); else the positions times RoPE's frequencies w."""
        B, Tn, _ = x.shape
        half = self.D // 2
        inv, _ = self._frequencies(ctx["T_rows"])
        inv = inv.to(x.device)  # (B, D/2)
        if self.kind["rope_angles"] != "accumulated":
            return (ctx["q_pos"].to(torch.float64)[:, None, :] * inv[:, :, None])[:, None]  # (B, 1, D/2, Tn)
        steps = -F.logsigmoid(-self.angle_proj(x))  # softplus(z) = -log sigmoid(-z), as Horizon computes it
        delta = steps.view(B, Tn, -1, half).to(torch.float64) * inv[:, None, None, :]  # (B, Tn, G, D/2)
        delta = delta.masked_fill(~ctx["q_valid"][:, :, None, None], 0.0).permute(0, 2, 3, 1)  # (B, G, D/2, Tn)
        sums = torch.cumsum(delta, dim=-1)
        if cache_layer is not None and cache_layer.angles is not None:
            sums = sums + cache_layer.angles[..., -1:]
        return sums

    def _windows(self, ctx, device) -> torch.Tensor:
        """W (B, H): the window of each sequence (its T) and attention head; 0 = unbounded. Decoding needs a
        prefix whole in the first call."""
        H, Ho, kind = self.Ha, self.H, self.kind
        T_rows = ctx["T_rows"]
        wins = {T: [w for w in layer_windows(kind, Ho, T, self.config.train_length) for _ in range(H // Ho)]
                for T in set(T_rows)}  # DIFF V2: the pair shares its output head's window
        P = int(kind["prefix"])
        if P > 0 and ctx["past"] and bool(((ctx["q_pos"] < P) & ctx["q_valid"]).any()):
            raise ValueError(f"layer {self.layer_idx}: its prefix of {P} tokens attends bidirectionally; decode with a "
                             f"prompt of at least {P} tokens (Horizon refuses it too)")
        return torch.tensor([wins[T] for T in T_rows], dtype=torch.long, device=device)

    def _rotate(self, q, k, ctx, W):
        """RoPE / p-RoPE: q and k rotated at their positions. With LaMPE, q and k stay and the third value holds
        (q at each region's positions, k plain, k at the middle's positions, the region of each pair)."""
        kind = self.kind
        if kind["pos"] not in ("rope", "prope"):
            return q, k, None
        inv, mscale = self._frequencies(ctx["T_rows"])
        inv, mscale = inv.to(q.device), mscale.to(q.device)
        # LaMPE (config.lampe, read at each call): RoPE layers (pos rope, as Horizon's eval.lampe sets it) whose
        # every window is unbounded, without chunks
        use = kind["pos"] == "rope" and not bool((W != 0).any()) and int(kind["chunk"]) == 0 and int(kind["prefix"]) == 0
        lampe = self.config.lampe_settings() if use else None
        if lampe is None:
            return apply_rotary(q, ctx["q_pos"], inv, mscale), apply_rotary(k, ctx["k_pos"], inv, mscale), None
        if kind["sink"] or kind["forget"] or kind["logit"] == "logn" or self.rates:
            raise NotImplementedError(f"layer {self.layer_idx}: LaMPE attends to its regions separately and takes "
                                      "no sinks, FoX forget gates, LogN / SSMax c or GRAPE-A's gated rates (Horizon's "
                                      "LaMPE refuses them too); set config.lampe = None for this model")
        if ctx["packed"]:
            raise NotImplementedError("LaMPE remaps positions for one input length and cannot score packed "
                                      "documents; run each document alone")
        q_positions, k_mid, region = self._lampe_positions(ctx, lampe)
        qs = [apply_rotary(q, pos, inv, mscale) for pos in q_positions]  # local, sink, middle
        return q, k, (qs, apply_rotary(k, ctx["k_pos"], inv, mscale), apply_rotary(k, k_mid, inv, mscale), region)

    def _logn_c(self, h: int, dt):
        return self.logn_c[h].to(dt) if self.kind["logn_learnable"] else float(self.kind["logn_c"])

    def _attend_eager(self, q, k, v, log_f, ctx, W, lampe, rates=(None, None)) -> torch.Tensor:
        """The reference: each head's (B, Tn, Tk) logits written out term by term. Returns (B, Tn, H, D)."""
        B, H, Tn, D = q.shape
        Tk, kind, dt = k.shape[-2], self.kind, q.dtype
        parts = mask_parts(kind, ctx)  # chunks, sink tokens and the prefix
        # terms that do not depend on the head: |t|, scale-invariant's a_t and m_t
        tt, a_t, m_t = distance_terms(kind, ctx["t"])
        csum = torch.cumsum(log_f.to(torch.float64), dim=-1) if log_f is not None else None  # FoX: C = cumsum(log f)
        scale = 1.0 / math.sqrt(D)
        G = H // self.Hkv
        outs = []
        for h in range(H):
            g = h // G  # GQA: query head h reads kv head h // (H / Hkv)
            # mask: a real key of the query's document, not after it, and t < W_h when W_h > 0
            visible = head_visible(ctx, parts, W[:, h][:, None, None])  # (B, Tn, Tk)
            # scores s_ij = scale * q_i . k_j
            if lampe is not None:
                qs, k_plain, k_middle, region = lampe
                s_reg = [torch.matmul(qs[0][:, h], k_plain[:, g].transpose(-1, -2)),
                         torch.matmul(qs[1][:, h], k_plain[:, g].transpose(-1, -2)),
                         torch.matmul(qs[2][:, h], k_middle[:, g].transpose(-1, -2))]
                scores = torch.where(region == 0, s_reg[0], torch.where(region == 1, s_reg[1], s_reg[2])) * scale
            else:
                scores = torch.matmul(q[:, h], k[:, g].transpose(-1, -2)) * scale
            n_visible = visible.sum(-1, keepdim=True)  # (B, Tn, 1)

            # L = r_i * a_t * s * c_h + m_t - slope_h * t + (C_i - C_j)
            coef, bias = head_logit_terms(row_factor(kind, ctx, n_visible, self.config.train_length), a_t, m_t, tt,
                                          self.slopes[h] if self.slopes is not None else None)
            logits = scores * coef.to(dt)
            if kind["logit"] == "logn":
                logits = logits * self._logn_c(h, dt)
            if bias is not None:
                logits = logits + bias.to(dt)
            if csum is not None:
                # FoX: + sum_{j < m <= i} log f_m = C_i - C_j
                logits = logits + (csum[:, h, Tk - Tn:, None] - csum[:, h, None, :]).to(dt)
            if rates[0] is not None or rates[1] is not None:
                # GRAPE-A: - |t| (dist_q_i + dist_k_j)
                rate = 0.0
                if rates[0] is not None:
                    rate = rate + rates[0][:, h, :, None].to(torch.float64)
                if rates[1] is not None:
                    rate = rate + rates[1][:, h, None, :].to(torch.float64)
                logits = logits - (tt * rate).to(dt)

            # softmax over the visible keys (and the sink z_h: a column with no value); a row that
            # sees nothing (a pad) outputs 0
            logits = logits.masked_fill(~visible, float("-inf"))
            empty = ~visible.any(dim=-1, keepdim=True)
            logits = logits.masked_fill(empty, 0.0)
            if kind["sink"]:
                z = self.sinks[h].to(dt).expand(B, Tn, 1)
                probs = torch.softmax(torch.cat([logits, z], dim=-1), dim=-1)[..., :Tk]
            else:
                probs = torch.softmax(logits, dim=-1)
            probs = probs.masked_fill(empty, 0.0)
            outs.append(torch.matmul(probs, v[:, g]))  # (B, Tn, D)
        return torch.stack(outs, dim=2)  # (B, Tn, H, D)

    def _heads_share_mask(self, W) -> bool:
        return bool((W == W[:, :1]).all())

    def _attend_sdpa(self, q, k, v, ctx, W) -> torch.Tensor:
        """torch's scaled_dot_product_attention for a layer without score terms: is_causal when the call is one
        unpadded sequence without past keys and the mask is causal, else head_visible as a boolean attn_mask
        ((B, 1, Tn, Tk) when every head has the same window). A row that sees nothing (a pad) outputs 0, as eager's."""
        kind, (B, H, Tn, D), Tk = self.kind, q.shape, k.shape[-2]
        gqa = H != self.Hkv
        plain = kind["mask"] == "causal" and int(kind["chunk"]) == 0 and int(kind["prefix"]) == 0
        if plain and not ctx["packed"] and not ctx["past"] and bool(ctx["k_valid"].all()):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            parts = mask_parts(kind, ctx)
            if self._heads_share_mask(W):
                mask = head_visible(ctx, parts, W[:, 0][:, None, None])[:, None]
            else:
                mask = torch.stack([head_visible(ctx, parts, W[:, h][:, None, None]) for h in range(H)], dim=1)
            empty = ~mask.any(dim=-1, keepdim=True)  # SDPA's softmax over no key is NaN: let it see all, then 0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | empty, enable_gqa=gqa)
            out = out.masked_fill(empty, 0.0)
        return out.transpose(1, 2)  # (B, Tn, H, D)

    def _row_factors(self, ctx, W) -> torch.Tensor:
        """r_i of every head and row (B, H, Tn) float64, by row_factor. SSMax's n_i (the keys a row sees) is
        counted with head_visible over blocks of 256 rows, so no (Tn, Tk) table is held whole."""
        kind, (B, H) = self.kind, W.shape
        L = self.config.train_length
        if kind["logit"] != "logn" or kind["logn_position"]:
            r = row_factor(kind, ctx, None, L)  # the same for every head
            return r[..., 0].expand(B, ctx["q_pos"].shape[1])[:, None].expand(B, H, -1)
        Tn, rows = ctx["q_pos"].shape[1], []
        for a in range(0, Tn, 256):
            sub = ctx.rows(a, min(Tn, a + 256))
            parts = mask_parts(kind, sub)
            n = torch.stack([head_visible(sub, parts, W[:, h][:, None, None]).sum(-1) for h in range(H)], dim=1)
            rows.append(n)
        n = torch.cat(rows, dim=-1)  # (B, H, Tn)
        return torch.stack([row_factor(kind, ctx, n[:, h, :, None], L)[..., 0] for h in range(H)], dim=1)

    def _attend_flex(self, q, k, v, log_f, ctx, W, rates=(None, None)) -> torch.Tensor:
        """FlexAttention: the mask as a mask_mod (mask_parts_at / visible_at at one pair: documents, causality,
        windows and scopes, chunks, sink tokens, the prefix, pads, the cache's offset) over a BlockMask, the logit
        terms as a score_mod (distance_terms and head_logit_terms at one pair, r_i captured per head and row by
        row_factor, FoX's cumulative log f captured per head and key); sinks fold in through the log-sum-exp:
        softmax over the keys and z_h scales the keys' output by sigmoid(lse - z_h). Returns (B, Tn, H, D)."""
        kind, (B, H, Tn, D), Tk, dt = self.kind, q.shape, k.shape[-2], q.dtype
        off = Tk - Tn  # the cached keys before the new queries
        q_pos, k_pos, doc_q, doc = ctx["q_pos"], ctx["k_pos"], ctx["doc_q"], ctx["doc"]

        def same_doc(b, qi, kj):
            return (doc_q[b, qi] == doc[b, kj]) & (doc[b, kj] >= 0)

        def mask_mod(b, h, qi, kj):
            qp, kp = q_pos[b, qi], k_pos[b, kj]
            parts = mask_parts_at(kind, qp, kp, lambda: same_doc(b, qi, kj))
            return visible_at(same_doc(b, qi, kj) & (kj <= qi + off), qp - kp, W[b, h], parts)

        Hm = 1 if self._heads_share_mask(W) else H
        compiled = _flex_compiles(self.config, q, need_lse=bool(kind["sink"]))
        block_mask = create_block_mask(mask_mod, B, Hm, Tn, Tk, device=q.device, _compile=compiled)

        score_mod = None
        if self.score_terms():
            R = self._row_factors(ctx, W)
            slopes = torch.tensor(self.slopes, dtype=torch.float64, device=q.device) if self.slopes is not None else None
            c = None  # LogN's c_h: learned, or the constant (in float64, as eager's Python float)
            if kind["logit"] == "logn":
                c = self.logn_c if kind["logn_learnable"] else torch.full((H,), float(kind["logn_c"]), dtype=torch.float64,
                                                                          device=q.device)
            csum = torch.cumsum(log_f.to(torch.float64), dim=-1) if log_f is not None else None
            dq = rates[0].to(torch.float64) if rates[0] is not None else None  # GRAPE-A's rates, per head and row / key
            dk = rates[1].to(torch.float64) if rates[1] is not None else None

            def score_mod(s, b, h, qi, kj):
                # L = r_i * a_t * s * c_h + m_t - slope_h * t + (C_i - C_j), in eager's order
                tt, a_t, m_t = distance_terms(kind, q_pos[b, qi] - k_pos[b, kj])
                coef, bias = head_logit_terms(R[b, h, qi], a_t, m_t, tt, slopes[h] if slopes is not None else None)
                s = s * coef.to(dt)
                if c is not None:
                    s = s * c[h].to(dt)
                if bias is not None:
                    s = s + bias.to(dt)
                if csum is not None:
                    s = s + (csum[b, h, qi + off] - csum[b, h, kj]).to(dt)
                if dq is not None:
                    s = s - (tt * dq[b, h, qi]).to(dt)
                if dk is not None:
                    s = s - (tt * dk[b, h, kj]).to(dt)
                return s

        fn = _compiled_flex_attention() if compiled else flex_attention
        # the mods read the layer kind's floats (tau, swan_a, ...): constants of the traced graph, not inputs
        with torch._dynamo.config.patch(specialize_float=True):
            if kind["sink"]:
                out, aux = fn(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=H != self.Hkv,
                              return_aux=AuxRequest(lse=True))
                # the sink z_h: one more column of the softmax that carries no value; a row that sees nothing
                # has lse = -inf and output 0, as eager's
                out = out * torch.sigmoid(aux.lse.to(dt) - self.sinks.to(dt)[None, :, None])[..., None]
            else:
                out = fn(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=H != self.Hkv)
        return out.transpose(1, 2)  # (B, Tn, H, D)

    def _output(self, x, y) -> torch.Tensor:
        """DIFF V2's pairs, the output gate and o_proj on y (B, Tn, H attention heads, D)."""
        B, Tn = x.shape[:2]
        kind, H, D = self.kind, self.H, self.D
        if kind["diff"]:
            # DIFF V2: y_h = A_2h V - sigmoid(lambda_h) A_2h+1 V, lambda = x W_lambda per token and head
            y = y[:, :, 0::2] - torch.sigmoid(self.lambda_proj(x))[..., None] * y[:, :, 1::2]
        if kind["gate"] == "head":
            # y_h <- y_h * sigmoid(x . w_h)
            y = y * torch.sigmoid(self.gate_proj(x))[..., None]
        y = y.reshape(B, Tn, H * D)
        if kind["gate"] == "element":
            # y_hd <- y_hd * sigmoid(x . w_hd)
            y = y * torch.sigmoid(self.gate_proj(x))
        return self.o_proj(y)


class HorizonDecoderLayer(GradientCheckpointingLayer):
    """h = x + Attn(RMSNorm(x)); out = h + MLP(RMSNorm(h)). With gradient checkpointing (transformers'
    GradientCheckpointingLayer) the layer keeps only its input and re-runs its forward in backward; x must come
    positionally, and the cache comes as the keyword `cache`, which checkpointing drops (a re-run would append twice)."""

    def __init__(self, config: HorizonConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = HorizonRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = HorizonAttention(config, layer_idx)
        self.post_attention_layernorm = HorizonRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = HorizonMLP(config)

    def forward(self, x, ctx=None, cache=None):
        h = x + self.self_attn(self.input_layernorm(x), ctx, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------

class HorizonPreTrainedModel(PreTrainedModel):
    config_class = HorizonConfig
    config: HorizonConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["HorizonDecoderLayer"]
    _supports_cache_class = True
    _supports_static_cache = False
    # attn_implementation: "eager" (the default: the reference), "sdpa" or "flex_attention", chosen per layer
    # among what each expresses (HorizonAttention.attention_path); flash_attention_2 is refused below
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_flash_attn = False

    def get_correct_attn_implementation(self, requested_attention: Optional[str], is_init_check: bool = False) -> str:
        # transformers picks sdpa when none is requested; here eager, each term written out, stays the default
        return super().get_correct_attn_implementation(requested_attention or "eager", is_init_check)

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # each layer reads config._attn_implementation at every call, so set_attn_implementation() takes effect
        return True

    def _flash_attn_can_dispatch(self, *args, **kwargs):
        raise ValueError("HorizonForCausalLM has no flash_attention_2 path: FlashAttention's kernels take no per-row "
                         "logit terms (SSMax, temperatures), distance terms (ALiBi, scale-invariant, FoX), per-head "
                         "windows or sinks; load with attn_implementation=\"flex_attention\" (every layer but LaMPE's) "
                         "or \"sdpa\" (layers without score terms), or \"eager\"")

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, HorizonAttention):
            if hasattr(module, "sinks"):
                hf_init.zeros_(module.sinks)
            if isinstance(getattr(module, "logn_c", None), nn.Parameter):
                hf_init.constant_(module.logn_c, float(module.kind["logn_c"]))
            if hasattr(module, "forget_proj"):
                hf_init.constant_(module.forget_proj.bias, float(module.kind["forget_bias"]))
            if hasattr(module, "angle_proj"):  # softplus(b) = 1: RoPE's steps at W = 0
                hf_init.constant_(module.angle_proj.bias, math.log(math.e - 1.0))
            if hasattr(module, "freq_factors"):
                f = module.kind["rope_freq_factors"] or [1.0] * (module.D // 2)
                with torch.no_grad():
                    module.freq_factors.copy_(torch.tensor(f, dtype=module.freq_factors.dtype).repeat(
                        module.freq_factors.numel() // len(f)))
            for name in ("additive_u", "additive_v"):  # GRAPE-A's directions ~ normal(1/sqrt(D))
                if hasattr(module, name):
                    hf_init.normal_(getattr(module, name), mean=0.0, std=1.0 / math.sqrt(module.D))
            if hasattr(module, "additive_w"):
                hf_init.constant_(module.additive_w, math.log(math.e - 1.0))


def _output(cls, cache, **fields):
    fields[_CACHE_FIELD] = cache
    return cls(**fields)


class CallContext(dict):
    """What every layer of one call shares (HorizonModel._context): per token (B, Tn) / (B, Tk) q_pos, k_pos,
    q_valid, k_valid, doc_q and doc (document ids, -1 on pads), q_idx / k_idx (indices among the keys), T_rows,
    T_doc, packed, past. The (B, Tn, Tk) tables t (p_i - p_j), same_doc and visible (a real key of the query's
    document, not after it) are made on first use and kept: eager reads them, while the sdpa and flex paths work
    from the per-token vectors and hold no (Tn, Tk) table unless their mask is one."""

    def __missing__(self, key):
        if key == "t":
            value = self["q_pos"][:, :, None] - self["k_pos"][:, None, :]
        elif key == "same_doc":
            value = (self["doc_q"][:, :, None] == self["doc"][:, None, :]) & (self["doc"][:, None, :] >= 0)
        elif key == "visible":
            value = self["same_doc"] & (self["k_idx"][None, :] <= self["q_idx"][:, None])[None]
        else:
            raise KeyError(key)
        self[key] = value
        return value

    def rows(self, a: int, b: int) -> "CallContext":
        """The context of queries a..b-1 (every key)."""
        sub = CallContext({k: v for k, v in self.items() if k not in ("t", "same_doc", "visible")})
        for k in ("q_pos", "q_valid", "doc_q", "T_doc"):
            sub[k] = self[k][:, a:b]
        sub["q_idx"] = self["q_idx"][a:b]
        return sub


class HorizonModel(HorizonPreTrainedModel):
    def __init__(self, config: HorizonConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([HorizonDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = HorizonRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def _context(self, B, Tn, device, attention_mask, position_ids, past: Optional[HorizonCacheLayer]) -> Dict[str, Any]:
        """What every layer of one call shares: positions, the pad mask, documents, causality, T."""
        have_past = past is not None and past.positions is not None
        past_pos = past.positions if have_past else torch.zeros(B, 0, dtype=torch.long, device=device)
        past_valid = past.valid if have_past else torch.zeros(B, 0, dtype=torch.bool, device=device)
        if past_pos.shape[0] != B:
            raise ValueError(f"the cache holds {past_pos.shape[0]} sequences, the call gives {B}")
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise NotImplementedError("HorizonForCausalLM takes a 2-D attention_mask (batch, past + new tokens) "
                                          "of 1 (token) and 0 (pad); packed documents go through position_ids")
            if attention_mask.shape[-1] < Tn:
                raise ValueError(f"attention_mask has {attention_mask.shape[-1]} columns for {Tn} new tokens")
            q_valid = attention_mask[:, -Tn:].to(device).bool()
        else:
            q_valid = torch.ones(B, Tn, dtype=torch.bool, device=device)
        if position_ids is None:
            # real tokens carry positions 0, 1, ... (cumsum(mask) - 1), continuing after the last cached one
            next_pos = torch.zeros(B, 1, dtype=torch.long, device=device)
            if past_pos.shape[-1] > 0:
                last = torch.where(past_valid, past_pos, torch.full_like(past_pos, -1))
                last = last.gather(1, (past_valid.long() * torch.arange(past_pos.shape[-1], device=device)).amax(-1, keepdim=True))
                next_pos = torch.where(past_valid.any(-1, keepdim=True), last + 1, next_pos)
            q_pos = (next_pos + q_valid.long().cumsum(-1) - 1).clamp(min=0)
        else:
            q_pos = position_ids.to(device).long().expand(B, Tn)
        k_pos = torch.cat([past_pos, q_pos], dim=-1)
        k_valid = torch.cat([past_valid, q_valid], dim=-1)
        Tk = k_pos.shape[-1]
        # documents: among the real keys, a new one starts where the position does not continue the
        # previous real key's (p_j != p_prev + 1): transformers' packing convention
        idx = torch.arange(Tk, device=device)
        last_valid = torch.where(k_valid, idx, torch.full_like(idx, -1)).cummax(dim=-1).values  # (B, Tk)
        prev = torch.cat([torch.full((B, 1), -1, dtype=torch.long, device=device), last_valid[:, :-1]], dim=-1)
        prev_pos = k_pos.gather(1, prev.clamp(min=0))
        start = k_valid & ((prev < 0) | (k_pos != prev_pos + 1))
        doc = torch.where(k_valid, start.long().cumsum(-1) - 1, torch.full_like(k_pos, -1))
        packed = bool((start.sum(-1) > 1).any())
        if packed and past_pos.shape[-1] > 0:
            raise ValueError("packed documents (position_ids that restart) with a KV cache are not supported "
                             "(Horizon refuses them too); decode each document alone, or call with use_cache=False")
        doc_q = torch.where(q_valid, doc[:, Tk - Tn:], torch.full_like(q_pos, -1))
        ctx_len = self.config.context_length
        if ctx_len:
            T_rows = [int(ctx_len)] * B
            T_doc = torch.full((B, Tn), int(ctx_len), dtype=torch.long, device=device)
        else:
            T_rows = [max(1, int(n)) for n in k_valid.sum(-1).tolist()]
            # the keys of the query's document: a count per document id (pads, -1, count nowhere)
            counts = torch.zeros(B, Tk + 1, dtype=torch.long, device=device).scatter_add_(1, doc + 1, torch.ones_like(doc))
            T_doc = torch.where(doc_q >= 0, counts.gather(1, doc_q + 1), torch.zeros_like(doc_q))
        return CallContext(q_pos=q_pos, k_pos=k_pos, q_valid=q_valid, k_valid=k_valid, doc_q=doc_q, doc=doc,
                           q_idx=idx[Tk - Tn:], k_idx=idx, T_rows=T_rows, T_doc=T_doc, packed=packed,
                           past=past_pos.shape[-1] > 0)

    def forward(
        self,
        input_ids: Optional[torch.LongTensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_values: Optional[Cache] = None,
        inputs_embeds: Optional[torch.FloatTensor] = None,
        use_cache: Optional[bool] = None,
        cache: Optional[Cache] = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        if cache is None:
            cache = past_key_values
        if use_cache is None:
            use_cache = getattr(self.config, "use_cache", True)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        B, Tn = x.shape[:2]
        if use_cache and self.training and torch.is_grad_enabled() and any(l.gradient_checkpointing for l in self.layers):
            logger.warning_once("HorizonForCausalLM: gradient checkpointing re-runs each layer in backward, which "
                                "would append to the cache twice: use_cache=False")
            use_cache, cache = False, None
        if use_cache and cache is None:
            cache = DynamicCache()
        layers = [_horizon_cache_layer(cache, i) for i in range(len(self.layers))] if cache is not None else [None] * len(self.layers)
        ctx = self._context(B, Tn, x.device, attention_mask, position_ids, layers[0])
        if ctx["past"] and not self.config.context_length and any(l.self_attn.depends_on_length() for l in self.layers):
            logger.warning_once(
                "HorizonForCausalLM: decoding with a cache while config.context_length is null: the length-dependent "
                "terms (SCOPE scopes, dynamic NTK, the temperature's s, LaMPE) take T = the tokens so far, so the "
                "cached keys of earlier steps were computed at another T than a full forward would use. Set "
                "config.context_length (Horizon decodes at T = prompt + max_new_tokens) for exact decoding.")
        for layer, kv in zip(self.layers, layers):
            x = layer(x, ctx=ctx, cache=kv)
        x = self.norm(x)
        return _output(BaseModelOutputWithPast, cache if use_cache else None, last_hidden_state=x)


class HorizonForCausalLM(HorizonPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: HorizonConfig):
        super().__init__(config)
        self.model = HorizonModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(
        self,
        input_ids: Optional[torch.LongTensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_values: Optional[Cache] = None,
        inputs_embeds: Optional[torch.FloatTensor] = None,
        labels: Optional[torch.LongTensor] = None,
        use_cache: Optional[bool] = None,
        logits_to_keep: Union[int, torch.Tensor] = 0,
        cache: Optional[Cache] = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                         cache=cache)
        h = out.last_hidden_state
        if isinstance(logits_to_keep, int):
            h = h[:, -logits_to_keep:] if logits_to_keep > 0 else h
        else:
            h = h[:, logits_to_keep]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            # causal LM loss: token n+1's cross-entropy given tokens <= n, mean over labels != -100
            lg = logits if logits.dtype == torch.float64 else logits.float()
            shift_logits = lg[:, :-1].reshape(-1, lg.shape[-1])
            shift_labels = labels[:, 1:].reshape(-1).to(lg.device)
            n_items = kwargs.get("num_items_in_batch")
            if n_items is None:
                loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=-100)
            else:
                loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=-100, reduction="sum") / n_items
        result = _output(CausalLMOutputWithPast, getattr(out, _CACHE_FIELD), loss=loss, logits=logits)
        return result.to_tuple() if kwargs.get("return_dict") is False else result


__all__ = ["HorizonPreTrainedModel", "HorizonModel", "HorizonForCausalLM"]
