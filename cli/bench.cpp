// Horizon: benchmarks printed as tables.
//   horizon bench attention [--T 1024,2048,4096,8192,16384] [--B 1] [--H 8] [--D 64]
//                           [--window 512] [--reps 3] [--block-q 64] [--block-k 64]
//                           [--masks causal,swa,scope] [--json FILE]
// Forward+backward of the fused attention op per mask and length: median time, peak memory
// (Horizon's CPU allocator, above the inputs), visible pairs, and the speedups against dense
// causal next to the visible-pair ratios. scripts/bench_attention.sh runs it side by side with
// the naive PyTorch computation.
#include "cli/bench.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include "attention/accounting.h"
#include "attention/fused.h"
#include "autograd/functions.h"
#include "core/cpu/kernels.h"
#include "core/rng.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "train/recipe.h"

namespace hz::cli {

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

struct Args {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  int64_t geti(const std::string& k, int64_t def) const { return std::stoll(get(k, std::to_string(def))); }
};

Args parse(const std::vector<std::string>& a, size_t from) {
  Args r;
  for (size_t i = from; i < a.size(); ++i) {
    HZ_CHECK(a[i].rfind("--", 0) == 0 && i + 1 < a.size(), ValueError, "bench: expected --key value, got '",
             a[i], "'");
    r.kv[a[i].substr(2)] = a[i + 1];
    ++i;
  }
  return r;
}

int bench_attention(const Args& args) {
  std::vector<int64_t> Ts;
  for (const auto& s : split(args.get("T", "1024,2048,4096,8192,16384"))) Ts.push_back(std::stoll(s));
  const int64_t B = args.geti("B", 1), H = args.geti("H", 8), D = args.geti("D", 64);
  const int64_t W = args.geti("window", 512), reps = args.geti("reps", 3);
  const auto masks = split(args.get("masks", "causal,swa,scope"));
  const std::string json = args.get("json", "");
  FILE* jf = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  HZ_CHECK(json.empty() || jf, ValueError, "bench: cannot write ", json);
  fmt::print("fused attention forward+backward, B={} H={} D={} f32, {} threads, tiles {}x{}, median of {}\n",
             B, H, D, cpu::num_threads(), args.geti("block-q", 64), args.geti("block-k", 64), reps);
  fmt::print("{:>6} {:>7} {:>14} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10} {:>9}\n", "T", "mask",
             "visible pairs", "pair ratio", "fwd ms", "fwd+bwd ms", "time ratio", "ratio/ratio",
             "peak MiB", "GFLOP/s");
  for (int64_t T : Ts) {
    double causal_ms = 0, causal_pairs = 0;
    for (const auto& m : masks) {
      attn::AttnConfig cfg;
      cfg.block_q = args.geti("block-q", 64);
      cfg.block_k = args.geti("block-k", 64);
      if (m == "causal") cfg.window.assign(H, 0);
      else if (m == "swa") cfg.window.assign(H, std::min(W, T));
      else if (m == "scope") cfg.window = attn::scope_windows(H, T);
      else throw ValueError("bench: unknown mask '" + m + "' (causal, swa, scope)");
      const attn::LayerCost cost = attn::attention_cost(cfg, H, T, T, D);
      Generator g(1);
      ag::Variable q(g.normal({B, H, T, D}), true), k(g.normal({B, H, T, D}), true),
          v(g.normal({B, H, T, D}), true);
      const Tensor gout = g.normal({B, H, T, D});
      std::vector<double> fwd, tot;
      int64_t peak = 0;
      for (int64_t r = 0; r < reps; ++r) {
        q.zero_grad();
        k.zero_grad();
        v.zero_grad();
        const int64_t base = cpu_memory_stats().current;
        reset_cpu_peak_memory();
        const auto t0 = std::chrono::steady_clock::now();
        attn::AttnOutput o = attn::fused_attention(q, k, v, cfg);
        const auto t1 = std::chrono::steady_clock::now();
        o.out.backward(gout);
        const auto t2 = std::chrono::steady_clock::now();
        peak = std::max(peak, cpu_memory_stats().peak - base);
        fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        tot.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      }
      std::sort(fwd.begin(), fwd.end());
      std::sort(tot.begin(), tot.end());
      const double f_ms = fwd[fwd.size() / 2], t_ms = tot[tot.size() / 2];
      const double pairs = static_cast<double>(cost.visible_pairs) * B;
      if (m == "causal") {
        causal_ms = t_ms;
        causal_pairs = pairs;
      }
      const double pr = causal_pairs > 0 ? causal_pairs / pairs : 0, tr = causal_ms > 0 ? causal_ms / t_ms : 0;
      const double gflops = cost.flops_fwd_bwd * B / (t_ms * 1e-3) / 1e9;
      fmt::print("{:>6} {:>7} {:>14} {:>10.2f} {:>10.1f} {:>10.1f} {:>10.2f} {:>8.0f}% {:>10.1f} {:>9.1f}\n",
                 T, m, static_cast<int64_t>(pairs), pr, f_ms, t_ms, tr, pr > 0 ? 100 * tr / pr : 0,
                 peak / 1048576.0, gflops);
      std::fflush(stdout);
      if (jf)
        fmt::print(jf,
                   "{{\"impl\": \"horizon\", \"T\": {}, \"mask\": \"{}\", \"pairs\": {}, \"fwd_ms\": {:.3f}, "
                   "\"fwd_bwd_ms\": {:.3f}, \"peak_mib\": {:.2f}}}\n",
                   T, m, static_cast<int64_t>(pairs), f_ms, t_ms, peak / 1048576.0);
    }
  }
  if (jf) std::fclose(jf);
  return 0;
}

// Training throughput of a recipe's model: full steps (forward, backward, clip, AdamW) on random
// tokens, median step time. The PyTorch twin is scripts/bench_train_torch.py.
int bench_train(const std::vector<std::string>& a) {
  HZ_CHECK(a.size() >= 3, ValueError, "usage: horizon bench train RECIPE.yaml [--steps N] [key=value ...]");
  int64_t steps = 20;
  std::vector<std::string> ov;
  for (size_t i = 3; i < a.size(); ++i) {
    if (a[i] == "--steps" && i + 1 < a.size()) steps = std::stoll(a[++i]);
    else ov.push_back(a[i]);
  }
  const train::Recipe r = train::load_recipe(a[2], ov);
  nn::Transformer m(r.model_config(), 1);
  auto named = m.named_parameters();
  std::vector<std::pair<std::string, ag::Variable*>> decay, rest;
  for (auto& p : named) (p.second->dim() >= 2 ? decay : rest).push_back(p);
  optim::AdamW opt({{"decay", decay, r.optim.lr, r.optim.weight_decay}, {"no_decay", rest, r.optim.lr, 0.0}});
  const int64_t B = r.data.batch_size, T = r.data.seq_len;
  Generator g(1);
  std::vector<double> times, fwd, bwd, upd;
  const int64_t warmup = 3;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const Tensor u = g.uniform({B, T + 1}, 0, 256, DType::F64);
    std::vector<double> v = u.to_vector();
    for (auto& x : v) x = std::floor(x);
    const Tensor ids = Tensor::from_vector(v, {B, T + 1}, DType::I64);
    using clk = std::chrono::steady_clock;
    const auto t0 = clk::now();
    ag::Variable loss = m.loss(ids.narrow(1, 0, T).contiguous(), ids.narrow(1, 1, T).contiguous());
    const auto t1 = clk::now();
    loss.backward();
    const auto t2 = clk::now();
    optim::clip_grad_norm(named, 1.0);
    opt.step();
    m.zero_grad();
    const auto t3 = clk::now();
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    if (i >= warmup) {
      times.push_back(sec(t0, t3));
      fwd.push_back(sec(t0, t1));
      bwd.push_back(sec(t1, t2));
      upd.push_back(sec(t2, t3));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double med = median(times);
  fmt::print("{{\"impl\": \"horizon\", \"params\": {}, \"step_ms\": {:.2f}, \"tok_per_s\": {:.1f}, \"threads\": {}, "
             "\"forward_ms\": {:.2f}, \"backward_ms\": {:.2f}, \"update_ms\": {:.2f}}}\n",
             m.num_parameters(), med * 1e3, B * T / med, cpu::num_threads(), median(fwd) * 1e3, median(bwd) * 1e3,
             median(upd) * 1e3);
  return 0;
}

}  // namespace

int bench_main(const std::vector<std::string>& args) {
  if (args.size() < 2 || args[1] == "--help") {
    fmt::print("usage: horizon bench train RECIPE.yaml [--steps 20] [key=value ...]\n"
               "       horizon bench attention [--T 1024,2048,...] [--B 1] [--H 8] [--D 64] [--window 512]\n"
               "                               [--reps 3] [--block-q 64] [--block-k 64] [--masks causal,swa,scope]\n"
               "                               [--json FILE]\n");
    return args.size() < 2 ? 2 : 0;
  }
  if (args[1] == "attention") return bench_attention(parse(args, 2));
  if (args[1] == "train") return bench_train(args);
  throw ValueError("unknown benchmark '" + args[1] + "'; available: attention, train");
}

}  // namespace hz::cli
