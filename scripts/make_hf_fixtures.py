"""Tiny random Hugging Face checkpoints for Horizon's import/export tests, built offline with
`transformers` (no hub access): config.json + safetensors exactly as `save_pretrained` writes them,
plus expected_logprobs.json holding fixed token ids and the per-token log-probabilities that
transformers (eager attention) computes after loading the saved directory back, in fp32 and with
every computation in float64 (its float32 casts promoted: the exact reference for Horizon in f64).

  tests/fixtures/hf/llama      LlamaForCausalLM, GQA 4/2, tied embeddings, vocab 259 (byte level), f32
  tests/fixtures/hf/mistral    MistralForCausalLM, sliding window 6, head_dim 16 != hidden/heads, bf16
  tests/fixtures/hf/qwen2      Qwen2ForCausalLM, q/k/v biases, window 5 on layers >= 1, f16
  tests/fixtures/hf/smollm3    SmolLM3ForCausalLM, no_rope_layers [1,1,1,0] (layer 3 NoPE), bf16, sharded
  tests/fixtures/hf/llama_bpe  LlamaForCausalLM with a real tokenizer: assets/tokenizers/kjv-bpe-4096's
                               tokenizer.json (4096 ids) beside the weights; the ids are those the
                               `tokenizers` library gives for a fixed text (stored as "text"), bf16
  tests/fixtures/hf/rope_*     one-layer Llama models with rope scalings: linear (legacy config.json
                               with top-level rope_theta / rope_scaling), dynamic, yarn (truncated
                               and exact ramp, attention_factor), llama3; they also record
                               transformers' inv_freq and attention_scaling
  tests/fixtures/safetensors/dtypes.safetensors   F64/F32/F16/BF16/I64/I32 tensors + __metadata__,
                               written by the safetensors library; dtypes.json the decoded values
                               and torch's f32 -> f16 / bf16 encodings of a set of awkward values

Regenerate (not part of the build or the tests):  HZ_VENV=/work/venv scripts/make_hf_fixtures.sh
Only some of them: HZ_FIXTURES=llama_bpe,qwen2 scripts/make_hf_fixtures.sh
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from hf_reference import logprobs
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                          "tests", "fixtures")
HF = os.path.join(ROOT, "hf")


def randomize(model, seed, round_to=None):
    """Every parameter ~ N(0, 0.2) (norm gains 1 + N(0, 0.1)), optionally rounded to bf16 / f16 so the
    fp32 reference equals what the stored low-precision file holds."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            v = torch.randn(p.shape, generator=g, dtype=torch.float64)
            v = 1.0 + 0.1 * v if name.endswith("norm.weight") else 0.2 * v
            v = v.float()
            if round_to is not None:
                v = v.to(round_to).float()
            p.copy_(v)


def save(name, config, cls, seed, T, dtype=torch.float32, shard=None, legacy=None, extra=None, tokenizer=None,
         text=None):
    if os.environ.get("HZ_FIXTURES") and name not in os.environ["HZ_FIXTURES"].split(","):
        return
    d = os.path.join(HF, name)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(seed)
    model = cls(config).eval()
    randomize(model, seed, round_to=None if dtype == torch.float32 else dtype)
    kw = {"max_shard_size": shard} if shard else {}
    model.to(dtype).save_pretrained(d, **kw)
    if os.path.exists(os.path.join(d, "generation_config.json")):
        os.remove(os.path.join(d, "generation_config.json"))
    if legacy:  # rewrite config.json in the pre-transformers-5 layout (top-level rope_theta / rope_scaling)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        rp = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rp["rope_theta"]
        cfg["rope_scaling"] = legacy
        cfg["torch_dtype"] = cfg.pop("dtype")
        cfg["transformers_version"] = "4.44.0"
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
    # the reference: what transformers computes from the saved directory (scripts/hf_reference.py)
    if tokenizer:  # a real tokenizer: the directory carries it, the ids are its encoding of `text`
        from tokenizers import Tokenizer
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(os.path.dirname(tokenizer), f), d)
        ids = Tokenizer.from_file(tokenizer).encode(text, add_special_tokens=False).ids
        extra = dict(extra or {}, text=text)
    else:
        gen = np.random.default_rng(seed)
        ids = [int(x) for x in gen.integers(0, config.vocab_size, size=T)]
    _, lp = logprobs(d, ids, cls=cls)
    _, lp64 = logprobs(d, ids, f64=True, cls=cls)
    sdpa = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa").eval()
    with torch.no_grad():
        lp_sdpa = torch.log_softmax(sdpa(torch.tensor([ids])).logits[0].double(), dim=-1)
    assert max(abs(lp[t] - float(lp_sdpa[t, ids[t + 1]])) for t in range(len(lp))) < 1e-5, "eager and sdpa disagree"
    loaded = cls.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        loaded(torch.tensor([ids]))  # dynamic RoPE keeps the table of the longest sequence seen
    out = {"architecture": cls.__name__, "ids": ids, "logprobs": lp, "logprobs_f64": lp64,
           "transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "note": "log p(ids[t+1] | ids[..t]) from transformers (eager attention): logprobs in fp32, "
                   "logprobs_f64 with every computation in float64"}
    rot = loaded.model.rotary_emb
    out["inv_freq"] = [float(x) for x in rot.inv_freq]
    out["attention_scaling"] = float(rot.attention_scaling)
    if extra:
        out.update(extra)
    with open(os.path.join(d, "expected_logprobs.json"), "w") as f:
        json.dump(out, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name:14s} {cls.__name__:20s} {len(ids):3d} tokens  {size / 1024:6.1f} KB  files: "
          f"{sorted(os.listdir(d))}")


def rope_llama(rope_parameters, max_pos=1024, vocab=64):
    return LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_pos,
                       rms_norm_eps=1e-5, tie_word_embeddings=True, rope_parameters=rope_parameters)


def safetensors_dtypes():
    d = os.path.join(ROOT, "safetensors")
    os.makedirs(d, exist_ok=True)
    awkward = [0.0, -0.0, 1.0, -2.5, 65504.0, 65520.0, 65519.99, 1e6, -1e6, 6.1035156e-05, 6.0e-8, 2.9802322e-08,
               2.9802326e-08, 1e-9, 1.0009765625, 1.00048828125, 1.00146484375, 3.14159265, float("inf"),
               float("-inf"), 1.00390625, 1.001953125, 1.005859375, 3.4e38, 1e-40, -1e-45, 0.33333334]
    src = torch.tensor(awkward, dtype=torch.float32)
    tensors = {
        "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 7,
        "f64": torch.tensor([[1.0 / 3, -2.0], [1e300, 5e-324]], dtype=torch.float64),
        "f16": src.to(torch.float16),
        "bf16": src.to(torch.bfloat16),
        "i64": torch.tensor([-(2 ** 62), 7, 2 ** 40], dtype=torch.int64),
        "i32": torch.tensor([[-5], [2 ** 31 - 1]], dtype=torch.int32),
        "empty": torch.zeros((0, 4), dtype=torch.float32),
        "scalar": torch.tensor(2.5, dtype=torch.float32),
    }
    path = os.path.join(d, "dtypes.safetensors")
    save_file(tensors, path, metadata={"format": "pt", "writer": "scripts/make_hf_fixtures.py"})
    nan = torch.tensor([float("nan")])
    fl = lambda xs: [repr(float(x)) for x in xs]  # strings: JSON has no inf; C++ reads them with stod
    expect = {
        "source_f32": fl(src),
        "f16_as_f32": fl(tensors["f16"].float()),
        "bf16_as_f32": fl(tensors["bf16"].float()),
        "f16_bits": [int(x) for x in tensors["f16"].view(torch.int16).to(torch.int32) & 0xFFFF],
        "bf16_bits": [int(x) for x in tensors["bf16"].view(torch.int16).to(torch.int32) & 0xFFFF],
        "nan_f16_bits": int(nan.to(torch.float16).view(torch.int16)) & 0xFFFF,
        "f32": fl(tensors["f32"].flatten()),
        "f64": fl(tensors["f64"].flatten()),
        "i64": [int(x) for x in tensors["i64"]],
        "i32": [int(x) for x in tensors["i32"].flatten()],
    }
    with open(os.path.join(d, "dtypes.json"), "w") as f:
        json.dump(expect, f, indent=1)
    print(f"safetensors/dtypes.safetensors {os.path.getsize(path)} bytes")


def main():
    torch.set_num_threads(2)
    os.makedirs(HF, exist_ok=True)
    save("llama", LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                              rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=256, eos_token_id=257,
                              pad_token_id=258, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         LlamaForCausalLM, seed=1, T=24)
    save("mistral", MistralConfig(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=6,
                                  max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                  rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
         MistralForCausalLM, seed=2, T=24, dtype=torch.bfloat16)
    save("qwen2", Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True,
                              sliding_window=5, max_window_layers=1, max_position_embeddings=128,
                              rms_norm_eps=1e-6, tie_word_embeddings=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         Qwen2ForCausalLM, seed=3, T=24, dtype=torch.float16)
    save("smollm3", SmolLM3Config(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                  rms_norm_eps=1e-6, tie_word_embeddings=True, pad_token_id=None,
                                  bos_token_id=None, eos_token_id=None,
                                  rope_parameters={"rope_type": "default", "rope_theta": 20000.0}),
         SmolLM3ForCausalLM, seed=4, T=24, dtype=torch.bfloat16, shard="20KB")
    kjv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "assets", "tokenizers", "kjv-bpe-4096",
                       "tokenizer.json")
    save("llama_bpe", LlamaConfig(vocab_size=4096, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                  rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                                  pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         LlamaForCausalLM, seed=10, T=0, dtype=torch.bfloat16, tokenizer=kjv,
         text="In the beginning God created the heaven and the earth; 2 Kings 3:14 — \u00e9t\u00e9  \u201cquoted\u201d, "
              "they're   here.\n\nAnd it was so.")
    # rope scalings: one-layer Llama, 48 tokens
    save("rope_linear", rope_llama({"rope_type": "default", "rope_theta": 10000.0}), LlamaForCausalLM, seed=5,
         T=48, dtype=torch.bfloat16, legacy={"type": "linear", "factor": 2.0})
    save("rope_dynamic", rope_llama({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, max_pos=16),
         LlamaForCausalLM, seed=6, T=48, dtype=torch.bfloat16)
    save("rope_yarn", rope_llama({"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0,
                                  "original_max_position_embeddings": 256}),
         LlamaForCausalLM, seed=7, T=48, dtype=torch.bfloat16)
    save("rope_yarn_exact", rope_llama({"rope_type": "yarn", "rope_theta": 500.0, "factor": 3.0,
                                        "original_max_position_embeddings": 200, "beta_fast": 16.0,
                                        "beta_slow": 2.0, "truncate": False, "attention_factor": 1.2}, max_pos=600),
         LlamaForCausalLM, seed=8, T=48, dtype=torch.bfloat16)
    save("rope_llama3", rope_llama({"rope_type": "llama3", "rope_theta": 500.0, "factor": 4.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 256}),
         LlamaForCausalLM, seed=9, T=48, dtype=torch.bfloat16)
    if not os.environ.get("HZ_FIXTURES") or "safetensors" in os.environ["HZ_FIXTURES"].split(","):
        safetensors_dtypes()


if __name__ == "__main__":
    main()
