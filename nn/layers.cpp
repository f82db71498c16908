#include "nn/layers.h"

namespace hz::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, double init_std, DType dt) {
  weight = register_parameter("weight", Tensor::zeros({out, in}, dt), Init::normal(init_std));
  if (has_bias) bias = register_parameter("bias", Tensor::zeros({out}, dt), Init::constant(0.0));
}

ag::Variable Linear::forward(const ag::Variable& x) const {
  if (!autocast_active()) return ag::linear(x, weight, bias);
  const DType c = compute_dtype();
  return ag::linear(ag::cast(x, c), ag::cast(weight, c), bias.defined() ? ag::cast(bias, c) : bias);
}

ag::Variable Embedding::forward(const Tensor& ids) const {
  ag::Variable rows = ag::embedding(weight, ids);  // gather in the table's dtype, then cast the rows
  return autocast_active() ? ag::cast(rows, compute_dtype()) : rows;
}

Embedding::Embedding(int64_t vocab, int64_t dim, double init_std, DType dt) {
  weight = register_parameter("weight", Tensor::zeros({vocab, dim}, dt), Init::normal(init_std));
}

RMSNorm::RMSNorm(int64_t dim, double e, DType dt) : eps(e) {
  weight = register_parameter("weight", Tensor::ones({dim}, dt), Init::constant(1.0));
}

static const char* const kMlpNames[] = {"swiglu", "relu2", "gelu"};
const char* mlp_name(MlpKind k) { return kMlpNames[static_cast<int>(k)]; }
MlpKind parse_mlp(const std::string& s) {
  for (int i = 0; i < static_cast<int>(MlpKind::Count); ++i)
    if (s == kMlpNames[i]) return static_cast<MlpKind>(i);
  throw ValueError("unknown mlp '" + s + "'; expected one of: swiglu relu2 gelu");
}

MLP::MLP(MlpKind k, int64_t dim, int64_t hidden, double init_std, double resid_std, DType dt) : kind(k) {
  w1 = register_module("w1", std::make_shared<Linear>(dim, hidden, false, init_std, dt));
  if (kind == MlpKind::SwiGLU) w3 = register_module("w3", std::make_shared<Linear>(dim, hidden, false, init_std, dt));
  w2 = register_module("w2", std::make_shared<Linear>(hidden, dim, false, resid_std, dt));
}

ActivationCost MLP::cost(const CallShape& s) const {
  const int64_t N = s.tokens(), C = w1->weight.size(1), F = w1->weight.size(0);
  const bool swiglu = kind == MlpKind::SwiGLU;
  // kept: both projections and the gated product (SwiGLU's gate is one op that keeps no silu), or
  // the projection and the activation; no grad: the hidden products live until the output
  // projection returns (its output included)
  return {N * F * s.act * (swiglu ? 3 : 2), 2 * N * C * s.act + (swiglu ? 2 : 1) * N * F * s.act,
          N * F * s.act * (swiglu ? 3 : 2) + N * C * s.act};
}

ag::Variable MLP::forward(const ag::Variable& x) const {
  switch (kind) {
    case MlpKind::SwiGLU: return w2->forward(ag::swiglu(w1->forward(x), w3->forward(x)));
    case MlpKind::ReLU2: return w2->forward(ag::relu2(w1->forward(x)));
    case MlpKind::GELU: return w2->forward(ag::gelu(w1->forward(x)));
    default: throw ValueError("bad mlp kind");
  }
}

}  // namespace hz::nn
