"""HorizonConfig: the configuration of a model trained by Horizon (`horizon convert to-hf`).

Every attention layer belongs to a named *layer kind*; `layer_kinds` maps each name to the full set
of Horizon's per-layer fields (position encoding, mask, logit transform, QK-norm, gate, sinks, FoX),
`layer_pattern` repeats over the layers and `layer_overrides` replaces single layers:

    kind of layer i = layer_overrides.get(str(i), layer_pattern[i % len(layer_pattern)])

Length-dependent terms (SCOPE scopes that are not frozen, dynamic NTK, the temperature's
s = T / train_length, LaMPE's input length l) use T = `context_length`, or, when it is null, the
number of key positions the call sees (the sequence's past and new tokens, pads excluded).
"""
import copy
import json
import math
import os
from typing import Any, Dict, List, Optional

from transformers import PretrainedConfig

# Every field of a layer kind, with its type, default and range: horizon_fields.json, written by Horizon
# from its field table (attention/spec_fields.h) beside this file. config.json written by Horizon always
# lists every field; a missing one takes the table's default, an unknown one is refused, and each value is
# checked against its type, range or names as Horizon checks it. transformers copies only the .py files
# into its module cache, so the table is read from beside this file or from the model's directory
# (HorizonConfig.from_pretrained), and save_pretrained writes it beside the saved config.
FIELDS_FILE = "horizon_fields.json"
_FIELDS: Optional[Dict[str, Any]] = None


def use_fields_file(path: str) -> Dict[str, Any]:
    """Reads a horizon_fields.json and makes it the table every layer kind is checked against."""
    global _FIELDS
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
        table["by_name"] = {e["name"]: e for e in table["fields"]}
        table["int_ceiling"] = int(table["int_ceiling"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a Horizon field table ({err})") from err
    _FIELDS = table
    return table


def fields_table() -> Dict[str, Any]:
    if _FIELDS is not None:
        return _FIELDS
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), FIELDS_FILE)
    if not os.path.isfile(beside):
        raise ValueError(f"{FIELDS_FILE} is missing: Horizon writes it beside configuration_horizon.py and "
                         f"config.json (horizon convert to-hf); load the model with from_pretrained(dir) of that folder")
    return use_fields_file(beside)


def layer_kind_defaults() -> Dict[str, Any]:
    return {name: copy.deepcopy(e["default"]) for name, e in fields_table()["by_name"].items()}


LAMPE_DEFAULTS: Dict[str, Any] = {"L": 0.0, "a": 0.0, "b": 0.0, "s_local": 512, "s_sink": 200}

HIDDEN_ACTS = ("silu", "relu2", "gelu")


def _check_value(where: str, e: Dict[str, Any], v: Any, ceiling: int) -> None:
    """One value against its field's type and range (hf/horizon.cpp's SpecReader checks the same)."""
    t = e["type"]
    if t == "choice":
        if v not in e["choices"]:
            raise ValueError(f"{where} = {v!r}; expected one of {', '.join(e['choices'])}")
        return
    if t == "bool":
        if not isinstance(v, bool):
            raise ValueError(f"{where} must be true or false, got {v!r}")
        return
    if t == "string":
        if not isinstance(v, str):
            raise ValueError(f"{where} must be a string, got {v!r}")
        return
    if t in ("int_list", "float_list"):
        if not isinstance(v, list):
            raise ValueError(f"{where} must be a list, got {v!r}")
        if len(v) > 65536:
            raise ValueError(f"{where} has {len(v)} entries; at most 65536")
        for x in v:
            _check_number(where, e, x, t == "int_list", ceiling)
        return
    _check_number(where, e, v, t == "int", ceiling)


def _check_number(where: str, e: Dict[str, Any], x: Any, integer: bool, ceiling: int) -> None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (integer and not isinstance(x, int)):
        raise ValueError(f"{where} must be {'an integer' if integer else 'a number'}, got {x!r}")
    r = e["range"]
    ok = abs(x) <= ceiling if integer else math.isfinite(x)  # integers at most 2^40, numbers finite
    if ok and r is not None:
        if r["lo"] is not None:
            ok = x > r["lo"] if r["lo_open"] else x >= r["lo"]
        if ok and r["hi"] is not None:
            ok = x < r["hi"] if r["hi_open"] else x <= r["hi"]
    if not ok:
        what = r["text"] if r is not None else ("at most 2^40" if integer else "finite")
        raise ValueError(f"{where} = {x!r} is out of range ({what})")


def resolve_layer_kind(name: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """The fields of one layer kind with defaults filled in, checked (ValueError naming the field)."""
    if not isinstance(fields, dict):
        raise ValueError(f"layer_kinds.{name} must be an object of fields, got {fields!r}")
    table = fields_table()
    known = table["by_name"]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise ValueError(f"layer_kinds.{name}: {', '.join(unknown)} is not a field of a Horizon layer kind "
                         f"(known: {', '.join(known)})")
    kind = layer_kind_defaults()
    kind.update(fields)
    if kind["logit"] == "ssmax":  # another name of logn (attention/spec.cpp's parse_logit)
        kind["logit"] = "logn"
    for key, e in known.items():
        _check_value(f"layer_kinds.{name}.{key}", e, kind[key], table["int_ceiling"])
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

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        # the field table beside config.json (transformers' module cache holds only the .py files)
        path = str(pretrained_model_name_or_path)
        if os.path.isdir(path):
            found = os.path.join(path, FIELDS_FILE)
            found = found if os.path.isfile(found) else None
        else:
            from transformers.utils import cached_file
            hub = {k: kwargs[k] for k in ("cache_dir", "force_download", "proxies", "token", "revision",
                                          "local_files_only", "subfolder") if k in kwargs}
            found = cached_file(path, FIELDS_FILE, _raise_exceptions_for_missing_entries=False, **hub)
        if found:
            use_fields_file(found)
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        super().save_pretrained(save_directory, *args, **kwargs)
        with open(os.path.join(save_directory, FIELDS_FILE), "w", encoding="utf-8") as f:
            json.dump({k: v for k, v in fields_table().items() if k != "by_name"}, f, indent=2)
            f.write("\n")

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
