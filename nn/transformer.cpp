#include "nn/transformer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <tuple>

#include "attention/accounting.h"
#include "autograd/recompute.h"
#include "core/device.h"
#include "nn/autocast.h"
#include "nn/kv_cache.h"

namespace hz::nn {

int64_t ModelConfig::hidden() const {
  if (mlp_hidden > 0) return mlp_hidden;
  if (mlp == MlpKind::SwiGLU) return (8 * d_model / 3 + 7) / 8 * 8;
  return 4 * d_model;
}

const LayerKind& ModelConfig::kind(const std::string& name) const {
  for (const auto& k : kinds)
    if (k.name == name) return k;
  std::string known;
  for (const auto& k : kinds) known += " " + k.name;
  throw ValueError("model: layer kind '" + name + "' is not defined; defined kinds:" + known);
}

std::vector<std::string> ModelConfig::layer_kind_names() const {
  HZ_CHECK(!pattern.empty(), ValueError, "model: the layer pattern is empty; give at least one kind");
  std::vector<std::string> names(n_layers);
  for (int64_t l = 0; l < n_layers; ++l) {
    auto it = overrides.find(l);
    names[l] = it != overrides.end() ? it->second : pattern[l % pattern.size()];
  }
  return names;
}

std::vector<attn::AttentionSpec> ModelConfig::layer_specs() const {
  std::vector<attn::AttentionSpec> specs;
  for (const auto& n : layer_kind_names()) specs.push_back(kind(n).attn);
  return specs;
}

void ModelConfig::validate() const {
  HZ_CHECK(vocab_size > 0 && d_model > 0 && n_layers > 0 && n_heads > 0, ValueError,
           "model: vocab_size, d_model, n_layers and n_heads must be positive");
  // Upper bounds far above any real model, checked before anything is sized by them (a recipe or
  // checkpoint with n_layers 2^31 must be refused here, not as std::bad_alloc).
  for (const auto& [field, v, most] : {std::tuple<const char*, int64_t, int64_t>{"vocab_size", vocab_size, (int64_t{1} << 31) - 1},
                                       {"d_model", d_model, int64_t{1} << 20},
                                       {"n_layers", n_layers, 10000},
                                       {"n_heads", n_heads, int64_t{1} << 16},
                                       {"head_dim", head_dim, int64_t{1} << 16},
                                       {"mlp_hidden", mlp_hidden, int64_t{1} << 22}})
    HZ_CHECK(v <= most, ValueError, "model: ", field, " = ", v, " is larger than Horizon accepts (at most ", most, ")");
  HZ_CHECK(head_dim > 0 || d_model % n_heads == 0, ValueError, "model: d_model (", d_model,
           ") is not divisible by n_heads (", n_heads, "); set head_dim explicitly or change n_heads");
  for (const auto& [l, n] : overrides)
    HZ_CHECK(l >= 0 && l < n_layers, ValueError, "model: override for layer ", l, " but the model has ",
             n_layers, " layers (0..", n_layers - 1, ")");
  for (const auto& k : kinds)  // a kind's name is a recipe path component (model.layer_kinds.NAME.field)
    HZ_CHECK(!k.name.empty() && std::all_of(k.name.begin(), k.name.end(),
                                            [](char ch) {
                                              return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
                                            }),
             ValueError, "model: layer kind name '", k.name, "': use letters, digits, '_' and '-' only");
  const auto names = layer_kind_names();
  for (int64_t l = 0; l < n_layers; ++l) {
    try {
      kind(names[l]).attn.validate(n_heads, kv_heads(), hdim(), train_len);
    } catch (const ValueError& e) {
      throw ValueError("model: layer " + std::to_string(l) + " (kind '" + names[l] + "'): " + e.what());
    }
  }
}

Block::Block(const ModelConfig& cfg, const attn::AttentionSpec& spec) {
  const double resid = cfg.init_std / std::sqrt(2.0 * cfg.n_layers);
  norm1 = register_module("norm1", std::make_shared<RMSNorm>(cfg.d_model, cfg.norm_eps, cfg.dtype));
  AttentionDims d{cfg.d_model, cfg.n_heads, cfg.kv_heads(), cfg.hdim(), cfg.qkv_bias};
  attn = register_module("attn", std::make_shared<AttentionLayer>(d, spec, cfg.init_std, resid, cfg.dtype));
  norm2 = register_module("norm2", std::make_shared<RMSNorm>(cfg.d_model, cfg.norm_eps, cfg.dtype));
  mlp = register_module("mlp", std::make_shared<MLP>(cfg.mlp, cfg.d_model, cfg.hidden(), cfg.init_std, resid, cfg.dtype));
}

BlockCost Block::cost(const CallShape& s, const AttnCall& call) const {
  const int64_t N = s.tokens(), C = norm1->weight.numel(), a = s.act;
  const ActivationCost at = attn->cost(s, call), ml = mlp->cost(s);
  BlockCost b;
  b.full = 4 * N * C * a + 2 * N * 4 + at.kept + ml.kept;
  b.kept_attention = 3 * N * C * a + ml.kept + N * 4;
  b.kept_layer = N * C * a;
  b.output = N * C * a;
  b.mlp_kept = ml.kept;
  b.after_mlp = 2 * N * C * a;
  b.mlp_transient = ml.transient;
  b.attention_transient = at.transient;
  // no grad: the attention's moment (the normed input and its working set), or the MLP's (the
  // attention's output, the residual, the second normed input and the MLP's working set)
  b.inference = std::max(N * C * a + at.inference, 3 * N * C * a + ml.inference);
  return b;
}

ag::Variable Residual::value() const { return delta.defined() ? ag::add(base, delta) : base; }

ag::ResidualNorm Residual::normed(const RMSNorm& norm) const {
  if (delta.defined()) return ag::add_rms_norm(base, delta, norm.weight, norm.eps);
  return {base, norm.forward(base)};
}

Residual Block::forward(Residual in, const Tensor& positions, const AttnCall& call, LayerKV* cache) const {
  const bool recompute = call.recompute != Recompute::None && !cache && ag::grad_enabled();
  const DType dt = compute_dtype();  // the recomputation runs in backward, outside this scope
  if (recompute && call.recompute == Recompute::Layer) {  // the block keeps its input, one value
    AttnCall inner = call;
    inner.recompute = Recompute::None;
    return {ag::recompute(
                [this, positions, inner, dt](const std::vector<ag::Variable>& x) {
                  ComputeScope scope(dt);
                  return forward(Residual{x[0], {}}, positions, inner, nullptr).value();
                },
                {in.value()}, "recompute_block"),
            {}};
  }
  ag::Variable x, a;
  if (recompute && call.recompute == Recompute::Attention) {  // norm1 is recomputed with the attention
    x = in.value();
    in = {};
    a = ag::recompute(
        [this, positions, call, dt](const std::vector<ag::Variable>& xs) {
          ComputeScope scope(dt);
          return attn->forward(norm1->forward(xs[0]), positions, call, nullptr);
        },
        {x}, "recompute_attention");
  } else {
    ag::ResidualNorm n1 = in.normed(*norm1);  // the previous block's residual add, fused with norm1
    in = {};
    x = n1.sum;
    a = attn->forward(std::move(n1.normed), positions, call, cache);
  }
  // h = x + a and norm2(h) in one pass (the same values and graph as the two ops); without gradients
  // x and a are freed before the MLP runs
  ag::ResidualNorm h = ag::add_rms_norm(x, a, norm2->weight, norm2->eps);
  x = a = {};
  return {h.sum, mlp->forward(std::move(h.normed))};
}

Transformer::Transformer(const ModelConfig& c, uint64_t seed, bool draw_weights) : cfg(c) {
  cfg.validate();
  embed = register_module("embed", std::make_shared<Embedding>(cfg.vocab_size, cfg.d_model, cfg.init_std, cfg.dtype));
  const auto specs = cfg.layer_specs();
  for (int64_t l = 0; l < cfg.n_layers; ++l)
    layers.push_back(register_module("layers." + std::to_string(l), std::make_shared<Block>(cfg, specs[l])));
  norm = register_module("norm", std::make_shared<RMSNorm>(cfg.d_model, cfg.norm_eps, cfg.dtype));
  if (!cfg.tie_embeddings)
    head = register_module("head", std::make_shared<Linear>(cfg.d_model, cfg.vocab_size, false, cfg.init_std, cfg.dtype));
  if (draw_weights) init_parameters(seed);
}

ag::Variable Transformer::forward(const Tensor& ids, const Tensor& positions, AttnCall call) const {
  ComputeScope scope(compute_dtype);
  return project(hidden(ids, positions, call));
}

ag::Variable Transformer::project(const ag::Variable& x) const {
  ComputeScope scope(compute_dtype);
  cpu::RowBlockedProducts blocked;  // the logits' rows as lm_head_loss's chunks compute them
  if (head) return head->forward(x);
  return ag::matmul(x, autocast_active() ? ag::cast(embed->weight, compute_dtype) : embed->weight, false, true);
}

ag::Variable Transformer::hidden(const Tensor& ids_in, const Tensor& positions_in, AttnCall call,
                                 KVCache* cache) const {
  HZ_CHECK(ids_in.dim() == 2, ShapeError, "model: ids must be (B, T), got ", shape_str(ids_in.shape()));
  const Device dev = embed->weight.value().device();
  const Tensor ids = ids_in.to(dev);
  // a route that holds a share of the sequence (context parallelism): the ids are that share of a
  // longer sequence, and the positions the share's
  const int64_t T = call.route ? call.route->sequence_length(ids.size(1)) : ids.size(1);
  HZ_CHECK(!(call.documents && positions_in.defined()), ValueError,
           "model: give positions or packed documents, not both (the documents define the positions)");
  if (call.documents)
    HZ_CHECK(call.documents->batch() == ids.size(0) && call.documents->seq_len() == T, ShapeError, "model: documents of ",
             call.documents->batch(), " x ", call.documents->seq_len(), " for ids ", shape_str(ids.shape()));
  Tensor positions = call.documents        ? call.documents->positions(dev)
                     : positions_in.defined() ? positions_in.to(dev)
                                              : Tensor::arange(0, T, 1, DType::I64, dev);
  // drawn positions reach the logit terms that read them (AttnCall::positions) whole, (B, T) f64:
  // each route places its keys with key_position (a KV cache's positions are its indices)
  bool logits_read = false;
  for (const auto& b : layers) logits_read |= b->attn->spec.logits_read_positions();
  if (positions_in.defined() && !cache && logits_read) {
    HZ_CHECK(positions.size(-1) == T, NotImplementedError, "model: ", positions.size(-1), " positions for a sequence of ",
             T, " tokens; layers whose logits read positions (ALiBi, scale-invariant, LogN by position, SWAN's row, "
             "Llama 4's temperature) need the whole sequence's");
    const Tensor p64 = positions.to(DType::F64);
    call.positions = p64.dim() == 2 ? p64.contiguous() : p64.view({1, T}).expand({ids.size(0), T}).contiguous();
  }
  // the whole sequence's positions (the default, or given for all T): this route's share of them
  if (call.route && (!positions_in.defined() || (positions.size(-1) == T && T != ids.size(1))))
    positions = call.route->share(positions, positions.dim() - 1);
  ComputeScope scope(compute_dtype);
  if (call.T == 0) call.T = T;
  if (call.train_len == 0) call.train_len = cfg.train_len;
  Residual x{embed->forward(ids), {}};
  for (size_t l = 0; l < layers.size(); ++l)
    x = layers[l]->forward(std::move(x), positions, call, cache ? &cache->layer(l) : nullptr);
  return x.normed(*norm).normed;  // the last block's residual add, fused with the final norm
}

ag::Variable Transformer::loss(const Tensor& ids, const Tensor& targets, const Tensor& weights, AttnCall call,
                               const Tensor& positions) const {
  ComputeScope scope(compute_dtype);
  const Tensor w_all = loss_weights(weights, ids.size(0), ids.size(1), call);
  const ag::Variable h = hidden(ids, positions, call);
  const ag::Variable x = ag::reshape(h, {-1, cfg.d_model});
  // the head's weight as project() multiplies it (the compute dtype under autocast)
  const ag::Variable& w = head ? head->weight : embed->weight;
  const ag::Variable wc = autocast_active() ? ag::cast(w, compute_dtype) : w;
  const Device dev = h.value().device();
  return ag::lm_head_loss(autocast_active() ? ag::cast(x, compute_dtype) : x, wc, targets.to(dev).reshape({-1}),
                          w_all.defined() ? w_all.to(dev).reshape({-1}) : Tensor(), loss_chunk);
}

Tensor Transformer::loss_weights(const Tensor& weights, int64_t B, int64_t T, const AttnCall& call) const {
  int64_t P = 0;
  for (const auto& b : layers) P = std::max(P, b->attn->spec.mask.prefix);
  if (P <= 1) return weights;  // a prefix of one token shows its query nothing ahead
  HZ_CHECK(!call.route || call.route->whole_sequence(), NotImplementedError,
           "model: prefix-LM layers attend ahead inside the prefix; context parallelism does not split them");
  std::vector<double> w = weights.defined() ? weights.to(Device::cpu()).to(DType::F64).to_vector()
                                            : std::vector<double>(static_cast<size_t>(B * T), 1.0);
  HZ_CHECK(static_cast<int64_t>(w.size()) == B * T, ShapeError, "model: ", w.size(), " weights for ", B, " x ", T,
           " targets");
  const int32_t* start = call.documents ? call.documents->bounds(Device::cpu()).data<int32_t>() : nullptr;
  const int32_t* end = start ? start + B * T : nullptr;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t s = start ? start[b * T + t] : 0, e = end ? end[b * T + t] : T;
      if (t + 1 < std::min(s + P, e)) w[b * T + t] = 0.0;  // its target lies in the prefix, which it sees
    }
  return Tensor::from_vector(w, {B, T}, DType::F32);
}

HeadCost Transformer::head_cost(const CallShape& s, int64_t loss_chunk) const {
  const int64_t N = s.tokens(), C = cfg.d_model, V = cfg.vocab_size, a = s.act;
  const int64_t chunk = std::min(N, ag::loss_chunk_step(loss_chunk, N));
  return {2 * N * C * a, 2 * chunk * V * a, 2 * V * C * 4 + N * C * a, 2 * N * C * a + chunk * V * (a < 4 ? a + 4 : a) + N * 8};
}

double Transformer::flops_per_token(int64_t T) const {
  double n_mm = 0;
  for (const auto& [name, v] : named_parameters())
    if (v->dim() == 2) n_mm += static_cast<double>(v->numel());
  if (!cfg.tie_embeddings) n_mm -= static_cast<double>(cfg.vocab_size * cfg.d_model);
  double attn_flops = 0;
  for (const auto& layer : layers) {
    AttnCall call;
    call.T = T;
    call.train_len = T;
    const attn::AttnConfig c = layer->attn->attn_config(call);
    attn_flops += 3.0 * attn::attention_cost(c, layer->attn->attn_heads(), T, T, cfg.hdim()).flops_fwd / static_cast<double>(T);
    attn_flops += 3.0 * layer->attn->angle_flops_per_token();
  }
  return 6.0 * n_mm + attn_flops;
}

int64_t Transformer::auto_loss_chunk(int64_t vocab_size, bool gpu) {
  const int64_t budget = gpu ? int64_t(1) << 30 : int64_t(64) << 20;
  return std::max<int64_t>(ag::kLossSlice, budget / (4 * std::max<int64_t>(1, vocab_size)));
}

Tensor Transformer::token_nll(const Tensor& ids, const Tensor& targets_in, AttnCall call, int64_t chunk) const {
  HZ_CHECK(targets_in.numel() == ids.numel(), ShapeError, "model: ", targets_in.numel(), " targets for ids ",
           shape_str(ids.shape()));
  ag::NoGradGuard ng;
  ComputeScope scope(compute_dtype);
  const Tensor h = hidden(ids, Tensor(), call).value().reshape({-1, cfg.d_model});
  const int64_t N = h.size(0);
  const Tensor targets = targets_in.reshape({-1}).to(h.device());
  // whole slices of ag::kLossSlice rows, as the training loss takes them
  const int64_t step =
      ag::loss_chunk_step(chunk < 0 ? auto_loss_chunk(cfg.vocab_size, h.device().is_cuda()) : chunk, N);
  Tensor nll = Tensor::empty({N}, DType::F64);
  double* out = nll.data<double>();
  for (int64_t r0 = 0; r0 < N; r0 += step) {
    const int64_t rows = std::min(step, N - r0);
    const Tensor logits = project(ag::Variable(h.narrow(0, r0, rows).contiguous())).value();
    const Tensor v = ops::cross_entropy_rows(logits, targets.narrow(0, r0, rows).contiguous()).to(Device::cpu());
    std::copy(v.data<double>(), v.data<double>() + rows, out + r0);
  }
  return nll;
}

}  // namespace hz::nn
