// Horizon: `horizon info [RECIPE|RUN_DIR]`: the build (threads, GEMM, CUDA, MPI, NCCL), and for a
// recipe its layers, the attention cost per evaluation length, the memory plan per rank by world
// size, the context-parallel traffic per layer, the feasible RoPE base per rotating layer kind and, with
// masked documents, a training batch.
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "attention/accounting.h"
#include "attention/backend.h"
#include "attention/rope_bounds.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/device.h"
#include "core/process.h"
#include "core/version.h"
#include "distributed/communicator.h"
#include "distributed/context/layout.h"
#include "study/hf_models.h"
#include "train/context_parallel.h"
#include "train/data.h"
#include "train/memory_plan.h"
#include "train/recipe.h"

namespace fs = std::filesystem;

namespace hz::cli {

namespace {

// The RoPE base bounds of every rotating layer kind at the training length and each evaluation length
// (attention/rope_bounds.h), with a warning per kind whose base falls outside at the training length.
void print_rope_bounds(const train::Recipe& r, const nn::Transformer& m, double eps) {
  std::vector<std::pair<std::string, attn::AttentionSpec>> kinds;
  int64_t depth = 0;
  const auto names = m.cfg.layer_kind_names();
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const attn::AttentionSpec& s = m.layers[l]->attn->spec;
    if (!s.rotary()) continue;
    ++depth;
    if (std::none_of(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == names[l]; }))
      kinds.emplace_back(names[l], s);
  }
  if (kinds.empty()) return;
  // the phase in float32, as transformers computes it for an export (Horizon's kernels use float64)
  const double eps_mach = 1.1920928955078125e-07;
  const auto rows = attn::rope_bounds_table(kinds, m.cfg.hdim(), depth, r.data.seq_len, r.eval_lengths(), eps, eps_mach);
  fmt::print("\nRoPE base bounds (Liu 2026, docs/methods.md): {} rotating layers, eps {}, float32 phases\n", depth, eps);
  fmt::print("  {:<12} {:>8} {:>12} {:>12} {:>12} {:>12}\n", "layer kind", "L", "base", "aliasing >", "stability >=",
             "precision <");
  for (const auto& row : rows)
    fmt::print("  {:<12} {:>8} {:>12.6g} {:>12.6g} {:>12.6g} {:>12.6g}{}{}\n", row.kind, row.L, row.base,
               row.bounds.aliasing, row.bounds.stability, row.bounds.precision, row.training ? " (training)" : "",
               row.verdict.empty() ? "" : "  " + row.verdict);
  for (const auto& row : rows)
    if (row.training && !row.verdict.empty())
      fmt::print("  warning: layer kind {}: base {:.6g} is {} at the training length {} (feasible: [{:.6g}, {:.6g})); "
                 "change its rope_base or the length\n",
                 row.kind, row.base, row.verdict, row.L, row.bounds.lower(), row.bounds.precision);
}

}  // namespace

int info_main(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--help") != args.end() || std::find(args.begin(), args.end(), "-h") != args.end()) {
    fmt::print("{}", "usage: horizon info [RECIPE.yaml|RUN_DIR] [key=value ...] [--rope-eps EPS]\n"
                     "  --rope-eps EPS  the smallest cosine the slowest RoPE pair's phase may reach over a length,\n"
                     "                  for the base bounds' stability bound (0 < EPS < 1; default 0.01)\n");
    return 0;
  }
  // the recipe or run and its key=value overrides are positional
  const Flags f = parse_flags(args, {"rope-eps"});
  const double rope_eps = f.getd("rope-eps", 0.01, 0.0, 1.0);
  HZ_CHECK(rope_eps > 0 && rope_eps < 1, ValueError, "info: --rope-eps must lie strictly between 0 and 1, got ",
           f.get("rope-eps"));
  std::vector<std::string> a{args.empty() ? std::string("info") : args[0]};
  a.insert(a.end(), f.positional.begin(), f.positional.end());
  fmt::print("horizon {}\n", version());
  for (const std::string& line : cpu::runtime_report(true)) fmt::print("  {}\n", line);
  fmt::print("  cuda: {}{}\n", cuda::compiled() ? "compiled" : "not compiled",
             cuda::compiled() ? fmt::format(", {} device(s) visible", cuda::device_count()) : std::string());
  fmt::print("  mpi: {}, nccl: {}\n", dist::mpi_compiled() ? "compiled" : "not compiled",
             dist::nccl_compiled() ? "compiled (libnccl " + dist::nccl_version() + ")" : "not compiled");
  if (a.size() < 2) return 0;
  const std::vector<std::string> ov(a.begin() + 2, a.end());
  train::Recipe r;
  if (fs::is_directory(a[1])) r = train::parse_trained_recipe(train::read_recipe_file(a[1] + "/config.yaml"), a[1] + "/config.yaml", ov);
  else r = study::load_recipe(a[1], ov);  // its init_from may name a Hugging Face directory
  const nn::Transformer m(r.model_config(), 0);
  fmt::print("\nrecipe {} (run {})\n  parameters: {}\n", r.source_file, r.run.name, m.num_parameters());
  for (size_t l = 0; l < m.layers.size(); ++l)
    fmt::print("  layer {:>2}: {:<12} {}\n", l, m.cfg.layer_kind_names()[l], m.layers[l]->attn->spec.describe());
  print_rope_bounds(r, m, rope_eps);
  // which implementation runs each layer kind's attention on a GPU (attention/backend.h)
  // f32: Horizon's kernels on the tensor cores as bf16 pairs at head_dim 64 / 128, unless the recipe asks for exact f32
  const bool f32 = r.run.precision == nn::Precision::FP32 && m.cfg.dtype == DType::F32;
  const bool pairs = f32 && !r.run.exact_f32_attention && (m.cfg.hdim() == 64 || m.cfg.hdim() == 128);
  fmt::print("\nattention on a GPU (run.attention_backend: {}, {} activations{}{}):\n", attn::name(r.run.attention_backend),
             r.run.precision == nn::Precision::BF16 ? "bf16" : dtype_name(m.cfg.dtype),
             !f32 ? "" : pairs ? ", on the tensor cores as bf16 pairs (run.exact_f32_attention: exact f32)"
                               : ", exact f32 (reference kernels)",
             attn::cudnn_compiled() ? "" : "; this build has no cudnn-frontend");
  for (const auto& [kind, route] : r.attention_routes()) fmt::print("  layer kind {}: {}\n", kind, route.describe());
  fmt::print("\nattention cost per sequence (all layers): visible pairs and forward FLOPs\n");
  fmt::print("{:>8} {:>16} {:>12} {:>10}\n", "T", "visible pairs", "GFLOP fwd", "vs dense");
  for (int64_t T : r.eval_lengths()) {
    int64_t pairs = 0;
    double flops = 0, dense = 0;
    for (const auto& b : m.layers) {
      nn::AttnCall call;
      call.T = T;
      call.train_len = r.data.seq_len;
      const auto c = attn::attention_cost(b->attn->attn_config(call), b->attn->attn_heads(), T, T, m.cfg.hdim());
      pairs += c.visible_pairs;
      flops += c.flops_fwd;
      dense += 4.0 * m.cfg.hdim() * b->attn->attn_heads() * T * (T + 1) / 2.0;
    }
    fmt::print("{:>8} {:>16} {:>12.3f} {:>9.1f}%\n", T, pairs, flops / 1e9, 100.0 * flops / dense);
  }
  {  // learned RoPE angles: the steps' projection (2 per weight of angle_w) and the rotations, per token
    double per_token = 0;
    for (const auto& b : m.layers) {
      per_token += b->attn->angle_flops_per_token();
      if (b->attn->angle_w.defined()) per_token += 2.0 * static_cast<double>(b->attn->angle_w.numel());
    }
    if (per_token > 0)
      fmt::print("learned RoPE angles (the steps' projection and the rotations): {:.3f} MFLOP fwd per token, {:.3f} "
                 "GFLOP per sequence at T {}\n", per_token / 1e6, per_token * r.data.seq_len / 1e9, r.data.seq_len);
  }
  {  // the memory plan per rank, by world size (the optimizer state and buckets depend on it)
    fmt::print("\nmemory plan per rank (train/memory_plan.h): B {} x T {}, {}, recompute {}, loss_chunk {}, "
               "shard_optimizer {}\n", r.data.batch_size, r.data.seq_len, nn::name(r.run.precision),
               nn::name(r.train.recompute), r.loss_chunk_rows(), r.parallel.shard_optimizer ? "true" : "false");
    const std::vector<int> worlds{1, 2, 4, 8};
    std::vector<train::MemoryPlan> plans;
    // a CPU run's process: what this one holds outside its tensors now stands in for the trainer's
    // (the same binary and libraries; the trainer measures its own before the first step)
    const int64_t outside = r.run.device == DeviceType::CPU ? resident_outside_tensors() : 0;
    for (int w : worlds) plans.push_back(train::plan_memory(r, m, w, outside));
    fmt::print("  {:<24}", "ranks");
    for (int w : worlds) fmt::print(" {:>12}", w);
    fmt::print("\n");
    for (size_t i = 0; i < plans[0].rows().size(); ++i) {
      fmt::print("  {:<24}", plans[0].rows()[i].first);
      for (const auto& p : plans) fmt::print(" {:>12}", train::format_bytes(p.rows()[i].second));
      fmt::print("\n");
    }
    if (cuda::available()) {
      const int64_t usable = cuda::memory_usable(0);
      fmt::print("  GPU 0 holds {}, {} of it free: the plan {} there\n", train::format_bytes(cuda::memory_bytes(0)),
                 train::format_bytes(usable), plans[0].peak <= usable ? "fits" : "does not fit");
    }
  }
  {  // context parallelism: what each layer exchanges (train/context_parallel.h)
    std::vector<int> groups{2, 4, 8};
    if (r.parallel.context > 1) groups = {static_cast<int>(r.parallel.context)};
    fmt::print("\ncontext parallelism (parallel.context = N): bytes one rank sends per step (k and v, forward and "
               "backward, {} micro-batch(es) of B {} x T {})\n", r.train.grad_accum, r.data.batch_size, r.data.seq_len);
    for (int N : groups) {
      if (r.data.seq_len < 2 * N) continue;
      const auto rows = train::context_plan(r, m, N);
      int64_t total = 0;
      for (const auto& row : rows) total += row.bytes * row.count * r.train.grad_accum;
      fmt::print("  N = {}: {} per step ({} tokens per chunk)\n", N, train::format_bytes(total),
                 dist::ZigzagLayout(r.data.seq_len, N, 0).min_chunk());
      for (const auto& row : rows)
        fmt::print("    layers {:<8} {:<11} {:>12} per layer\n", row.layers, row.exchange,
                   train::format_bytes(row.bytes * r.train.grad_accum));
    }
  }
  if (r.data.documents == attn::DocumentMode::Masked) {  // what a training batch looks like
    auto comm = dist::make_local();
    train::TrainData data = train::open_train_data(r, *comm, false);
    const data::Batch b = data.next();
    const auto docs = attn::Documents::of_batch(b.tokens.size(0), b.tokens.size(1), b.cu_seqlens,
                                                     {r.data.documents, r.data.position_reset});
    fmt::print("\nfirst training batch (data.documents: masked): {}\n", docs->describe());
    int64_t pairs = 0, stream = 0;
    for (const auto& layer : m.layers) {
      nn::AttnCall call;
      call.T = r.data.seq_len;
      call.train_len = r.data.seq_len;
      attn::AttnConfig cfg = layer->attn->attn_config(call);
      const int64_t Ha = layer->attn->attn_heads();
      stream += b.tokens.size(0) * attn::attention_cost(cfg, Ha, call.T, call.T, m.cfg.hdim()).visible_pairs;
      cfg.documents = docs;
      pairs += attn::attention_cost(cfg, Ha, call.T, call.T, m.cfg.hdim()).visible_pairs;
    }
    fmt::print("  visible pairs (all layers): {} masked vs {} stream ({:.1f}%)\n", pairs, stream,
               100.0 * static_cast<double>(pairs) / static_cast<double>(std::max<int64_t>(1, stream)));
  }
  return 0;
}

}  // namespace hz::cli
