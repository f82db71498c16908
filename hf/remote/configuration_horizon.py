"""HorizonConfig: the configuration of a model trained by Horizon (`horizon convert to-hf`).

Every attention layer belongs to a named *layer kind*; `layer_kinds` maps each name to the full set
of Horizon's per-layer fields (position encoding, mask, logit transform, QK-norm, gate, sinks, FoX),
`layer_pattern` repeats over the layers and `layer_overrides` replaces single layers:

    kind of layer i = layer_overrides.get(str(i), layer_pattern[i % len(layer_pattern)])

Length-dependent terms (SCOPE scopes that are not frozen, dynamic NTK, the temperature's
s = T / train_length, LaMPE's input length l) use T = `context_length`, or, when it is null, the
number of key positions the call sees (the sequence's past and new tokens, pads excluded).
"""
from typing import Any, Dict, List, Optional

from transformers import PretrainedConfig

# Every field of a layer kind with Horizon's default (attention/spec.h). config.json written by
# Horizon always lists all of them; a missing one takes this default, an unknown one is refused.
LAYER_KIND_DEFAULTS: Dict[str, Any] = {
    "pos": "rope",
    "rope_base": 10000.0,
    "rope_scaling": "none",
    "rope_factor": 1.0,
    "rope_original_context": 0,
    "yarn_alpha": 1.0,
    "yarn_beta": 32.0,
    "yarn_ramp": "rotations",
    "yarn_truncate": True,
    "yarn_mscale": 0.0,
    "llama3_low_freq_factor": 1.0,
    "llama3_high_freq_factor": 4.0,
    "prope_fraction": 0.5,
    "prope_base_eff": 1024.0,
    "rope_pairs": [],
    "rope_fraction": 1.0,
    "rope_freq_factors": [],
    "longrope_long_factors": [],
    "longrope_short_factors": [],
    "rope_select": "high",
    "mask": "causal",
    "window": 0,
    "chunk": 0,
    "sink_tokens": 0,
    "prefix": 0,
    "scope_gamma": 0.0,
    "scope_min": 1,
    "scope_max": 0,
    "scopes": [],
    "freeze_scopes": False,
    "logit": "identity",
    "tau": 10.0,
    "logn_c": 1.0,
    "logn_learnable": True,
    "swan_a": 362.0,
    "beta": 1.0,
    "temp_c": 0.0,
    "logn_position": False,
    "qtemp_alpha": 0.0,
    "qtemp_beta": 8192.0,
    "qk_norm": "none",
    "gate": "none",
    "sink": False,
    "forget": False,
    "forget_bias": 0.0,
    "diff": False,
}

# The accepted names of each enumerated field ("ssmax" is another name of logn).
LAYER_KIND_ENUMS: Dict[str, tuple] = {
    "pos": ("none", "rope", "prope", "alibi"),
    "rope_scaling": ("none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope"),
    "yarn_ramp": ("rotations", "index"),
    "rope_select": ("high", "low", "uniform"),
    "mask": ("causal", "window", "scope"),
    "logit": ("identity", "scale_invariant", "logn", "swan_row", "temperature"),
    "qk_norm": ("none", "full", "per_head"),
    "gate": ("none", "head", "element"),
}

LAMPE_DEFAULTS: Dict[str, Any] = {"L": 0.0, "a": 0.0, "b": 0.0, "s_local": 512, "s_sink": 200}

HIDDEN_ACTS = ("silu", "relu2", "gelu")


def resolve_layer_kind(name: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """The fields of one layer kind with defaults filled in, checked (ValueError naming the field)."""
    if not isinstance(fields, dict):
        raise ValueError(f"layer_kinds.{name} must be an object of fields, got {fields!r}")
    unknown = sorted(set(fields) - set(LAYER_KIND_DEFAULTS))
    if unknown:
        raise ValueError(f"layer_kinds.{name}: {', '.join(unknown)} is not a field of a Horizon layer kind "
                         f"(known: {', '.join(LAYER_KIND_DEFAULTS)})")
    kind = dict(LAYER_KIND_DEFAULTS)
    kind.update(fields)
    if kind["logit"] == "ssmax":
        kind["logit"] = "logn"
    for key, names in LAYER_KIND_ENUMS.items():
        if kind[key] not in names:
            raise ValueError(f"layer_kinds.{name}.{key} = {kind[key]!r}; expected one of {', '.join(names)}")
    return kind


class HorizonConfig(PretrainedConfig):
    model_type = "horizon"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]

    def __init__(
        self,
        vocab_size: int = 256,
        hidden_size: int = 64,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        num_key_value_heads: Optional[int] = None,
        head_dim: Optional[int] = None,
        intermediate_size: int = 176,
        hidden_act: str = "silu",
        rms_norm_eps: float = 1e-5,
        attention_bias: bool = False,
        tie_word_embeddings: bool = True,
        initializer_range: float = 0.02,
        train_length: int = 0,
        context_length: Optional[int] = None,
        layer_kinds: Optional[Dict[str, Dict[str, Any]]] = None,
        layer_pattern: Optional[List[str]] = None,
        layer_overrides: Optional[Dict[str, str]] = None,
        lampe: Optional[Dict[str, Any]] = None,
        window_convention: str = "",
        use_cache: bool = True,
        bos_token_id: Optional[int] = None,
        eos_token_id: Optional[int] = None,
        pad_token_id: Optional[int] = None,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.head_dim = hidden_size // num_attention_heads if head_dim is None else head_dim
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.rms_norm_eps = rms_norm_eps
        self.attention_bias = attention_bias
        self.initializer_range = initializer_range
        self.train_length = train_length
        self.context_length = context_length
        self.layer_kinds = {"default": {}} if layer_kinds is None else layer_kinds
        self.layer_pattern = list(self.layer_kinds)[:1] if layer_pattern is None else list(layer_pattern)
        self.layer_overrides = {} if layer_overrides is None else {str(k): v for k, v in layer_overrides.items()}
        self.lampe = lampe
        self.window_convention = window_convention
        self.use_cache = use_cache
        self.tie_word_embeddings = tie_word_embeddings
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.max_position_embeddings = kwargs.pop("max_position_embeddings", train_length)
        super().__init__(**kwargs)
        self._check()

    def _check(self):
        if self.hidden_act not in HIDDEN_ACTS:
            raise ValueError(f"hidden_act = {self.hidden_act!r}; expected one of {', '.join(HIDDEN_ACTS)}")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if not self.layer_pattern:
            raise ValueError("layer_pattern must name at least one layer kind")
        for name in list(self.layer_pattern) + list(self.layer_overrides.values()):
            if name not in self.layer_kinds:
                raise ValueError(f"layer kind {name!r} is not in layer_kinds ({', '.join(self.layer_kinds)})")
        for name, fields in self.layer_kinds.items():
            resolve_layer_kind(name, fields)
        if self.lampe is not None:
            unknown = sorted(set(self.lampe) - set(LAMPE_DEFAULTS))
            if unknown:
                raise ValueError(f"lampe: {', '.join(unknown)} is not a LaMPE field ({', '.join(LAMPE_DEFAULTS)})")

    def layer_kind_name(self, i: int) -> str:
        return self.layer_overrides.get(str(i), self.layer_pattern[i % len(self.layer_pattern)])

    def layer_kind(self, i: int) -> Dict[str, Any]:
        """Layer i's fields, defaults filled in."""
        name = self.layer_kind_name(i)
        return resolve_layer_kind(name, self.layer_kinds[name])

    def lampe_settings(self) -> Optional[Dict[str, Any]]:
        if self.lampe is None:
            return None
        out = dict(LAMPE_DEFAULTS)
        out.update(self.lampe)
        return out


__all__ = ["HorizonConfig"]
