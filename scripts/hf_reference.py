"""Per-token log-probabilities from transformers, the reference Horizon's Hugging Face import and
export are checked against (used by make_hf_fixtures.py and hf_check_export.py).

fp32: the model as a user loads it (eager attention). f64: transformers' math in float64
throughout; its modeling code casts to float32 for RMSNorm, the softmax and the RoPE tables even in
a float64 model (and dynamic RoPE derives its base in the default dtype), so while the rotary
tables are rebuilt and the forward runs, torch.float32 and the default dtype are float64.
"""
import torch
from transformers import AutoModelForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS


def logprobs(directory, ids, f64=False, cls=AutoModelForCausalLM):
    """log p(ids[t+1] | ids[..t]) for t = 0..n-2."""
    model = cls.from_pretrained(directory, dtype=torch.float64 if f64 else torch.float32,
                                attn_implementation="eager").eval()
    f32 = torch.float32
    if f64:
        torch.float32 = torch.float = torch.float64
        torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            if f64:
                rot = model.model.rotary_emb
                init = (rot.compute_default_rope_parameters if rot.rope_type == "default"
                        else ROPE_INIT_FUNCTIONS[rot.rope_type])
                inv, scale = init(model.config)
                rot.inv_freq, rot.original_inv_freq, rot.attention_scaling = inv, inv.clone(), scale
            logits = model(torch.tensor([ids])).logits[0]
    finally:
        torch.float32 = torch.float = f32
        torch.set_default_dtype(f32)
    assert logits.dtype == (torch.float64 if f64 else f32)
    lp = torch.log_softmax(logits.double(), dim=-1)
    return type(model).__name__, [float(lp[t, ids[t + 1]]) for t in range(len(ids) - 1)]
