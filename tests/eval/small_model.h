// Horizon eval tests: the small byte-vocabulary model the decoding and needle suites run.
#pragma once
#include "nn/transformer.h"

namespace hzt {

inline hz::nn::ModelConfig small_model(hz::DType dt = hz::DType::F32) {
  hz::nn::ModelConfig c;
  c.vocab_size = 259;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.mlp_hidden = 64;
  c.train_len = 16;
  c.init_std = 0.2;
  c.dtype = dt;
  return c;
}

}  // namespace hzt
