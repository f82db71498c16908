// Horizon: benchmarks printed as tables.
//   horizon bench attention [--device cpu|cuda] [--dtype f32|bf16|f64] [--impl auto|reference|tensor_core|cudnn]
//                           [--T 1024,...] [--B 1] [--H 8] [--D 64] [--window 512] [--reps 3]
//                           [--block-q 0] [--block-k 0] [--masks causal,swa,scope,docs2048,chunk8192,sink4]
//                           [--logits identity,scale_invariant,...] [--terms none,sink,fox,sink+fox,grape] [--json FILE]
// Forward+backward of the fused attention op per mask, logit transform and length (docsN: causal
// inside packed documents of N tokens, positions reset; the block-diagonal; chunkN: causal inside
// chunks of N positions, Llama 4's; sinkS: the sliding window plus the first S tokens): median time
// (on CUDA after a warm-up round, the device synchronised around each phase), peak memory of the
// device above the inputs, visible pairs, the speedups against dense causal next to the
// visible-pair ratios, and TFLOP/s counted on visible pairs (4 D per pair forward, 3.5x that
// forward+backward). On CUDA the defaults follow FlashAttention's benchmark: bf16, H = 2048 / D,
// B = 16384 / T. scripts/bench/bench_attention.sh runs the CPU side by side with naive PyTorch,
// scripts/bench/bench_attention_gpu.sh the GPU side by side with PyTorch's SDPA and FlexAttention.
#include "cli/bench.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <chrono>
#include <memory>
#include <cstdio>
#include <map>
#include <sstream>

#include "attention/accounting.h"
#include "cli/flags.h"
#include "attention/fused.h"
#include "autograd/functions.h"
#include "core/rng.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "core/device.h"
#include "cli/tokenize.h"
#include "distributed/communicator.h"
#include "eval/inference.h"
#include "nn/kv_cache.h"
#include "study/load_run.h"
#include "study/hf_models.h"
#include "core/process.h"
#include "train/memory_plan.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace hz::cli {

namespace {

const int32_t kAnyDocuments = 0;  // a non-null documents table for cudnn_plan's question

int bench_attention(const Flags& args) {
  const std::string device = args.get("device", "cpu");
  HZ_CHECK(device == "cpu" || device == "cuda", ValueError, "bench: --device cpu or cuda, got '", device, "'");
  const bool gpu = device == "cuda";
  HZ_CHECK(!gpu || cuda::available(), DeviceError,
           "bench: --device cuda but no usable GPU (check nvidia-smi; a build with HZ_CUDA=ON)");
  const Device dev = gpu ? Device::cuda(0) : Device::cpu();
  const std::string dts = args.get("dtype", gpu ? "bf16" : "f32");
  HZ_CHECK(dts == "f32" || dts == "bf16" || dts == "f64", ValueError, "bench: --dtype f32, bf16 or f64");
  const DType dt = dts == "bf16" ? DType::BF16 : dts == "f64" ? DType::F64 : DType::F32;
  std::vector<int64_t> Ts;
  for (const auto& s : split_list(args.get("T", gpu ? "1024,2048,4096,8192,16384,32768" : "1024,2048,4096,8192,16384")))
    Ts.push_back(parse_int(s, "--T", 1, int64_t{1} << 24));
  const int64_t D = args.geti("D", 64), H = args.geti("H", gpu ? 2048 / D : 8);
  const int64_t B_arg = args.geti("B", gpu ? 0 : 1);  // 0: 16k tokens per batch, as FlashAttention's benchmark
  const int64_t W = args.geti("window", 512), reps = args.geti("reps", gpu ? 10 : 3);
  const auto masks = split_list(args.get("masks", "causal,swa,scope"));
  const auto logits = split_list(args.get("logits", "identity"));
  // the softmax additions: none, sink, fox, sink+fox or grape (GRAPE-A's learned rates dist_q and dist_k;
  // on CUDA the tensor-core kernels' general variant) (timed against none at the same mask)
  const auto term_sets = split_list(args.get("terms", "none"));
  for (const auto& t : term_sets)
    HZ_CHECK(t == "none" || t == "sink" || t == "fox" || t == "sink+fox" || t == "grape", ValueError, "bench: --terms "
             "takes none, sink, fox, sink+fox and grape, got '", t, "'");
  const std::string impl = args.get("impl", "auto");
  HZ_CHECK(impl == "auto" || impl == "reference" || impl == "tensor_core" || impl == "cudnn", ValueError,
           "bench: --impl auto, reference, tensor_core or cudnn");
  const std::string json = args.get("json", "");
  FILE* jf = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  HZ_CHECK(json.empty() || jf, ValueError, "bench: cannot write ", json);
  auto sync = [&] { synchronize(dev); };
  fmt::print("fused attention forward+backward on {}, {} H={} D={}, {}, median of {}{}\n",
             gpu ? cuda::device_name(0) : "cpu (" + std::to_string(cpu::num_threads()) + " threads)",
             B_arg > 0 ? "B=" + std::to_string(B_arg) : "B=16384/T", H, D, dts, reps, gpu ? " after a warm-up" : "");
  fmt::print("{:>6} {:>7} {:>15} {:>9} {:>14} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:>9} {:>9} {:>8}\n", "T", "mask",
             "logits", "terms", "visible pairs", "pair ratio", "fwd ms", "fwd+bwd ms", "time ratio", "ratio/ratio",
             "peak MiB", "TFLOP/s f", "TFLOP/s fb", "vs none");
  for (int64_t T : Ts) {
    const int64_t B = B_arg > 0 ? B_arg : std::max<int64_t>(1, 16384 / T);
    for (const auto& lg : logits) {
      std::map<std::string, double> plain_ms;  // per mask, without terms
      for (const auto& terms : term_sets) {
        double causal_ms = 0, causal_pairs = 0;
        for (const auto& m : masks) {
          attn::AttnConfig cfg;
          cfg.block_q = args.geti("block-q", 0);
          cfg.block_k = args.geti("block-k", 0);
          cfg.logit = attn::parse_logit(lg);
          cfg.impl = impl == "reference" ? attn::AttnImpl::Reference
                     : impl == "tensor_core" ? attn::AttnImpl::TensorCore : attn::AttnImpl::Auto;
          if (impl == "cudnn") cfg.backend = attn::AttnBackend::CuDNN;
          if (m == "causal") cfg.window.assign(H, 0);
          else if (m == "swa") cfg.window.assign(H, std::min(W, T));
          else if (m == "scope") cfg.window = attn::scope_windows(H, T);
          else if (m.rfind("chunk", 0) == 0 && m.size() > 5 && std::isdigit(static_cast<unsigned char>(m[5]))) {
            cfg.window.assign(H, 0);  // chunked attention: causal inside chunks of N positions
            cfg.chunk = parse_int(m.substr(5), "the mask " + m, 1, int64_t{1} << 24);
          } else if (m.rfind("sink", 0) == 0 && m.size() > 4 && std::isdigit(static_cast<unsigned char>(m[4]))) {
            cfg.window.assign(H, std::min(W, T));  // the sliding window and the first S tokens
            cfg.sink_tokens = parse_int(m.substr(4), "the mask " + m, 1, int64_t{1} << 24);
          }
          else if (m.rfind("docs", 0) == 0 && m.size() > 4 && std::isdigit(static_cast<unsigned char>(m[4]))) {
            // causal within packed documents of N tokens (the last one of a sequence shorter)
            const int64_t N = parse_int(m.substr(4), "the mask " + m, 1, int64_t{1} << 24);
            HZ_CHECK(N >= 1, ValueError, "bench: docsN needs N >= 1");
            cfg.window.assign(H, 0);
            std::vector<int64_t> cu{0};
            for (int64_t b = 0; b < B; ++b)
              for (int64_t s0 = 0; s0 < T; s0 += N) cu.push_back(b * T + std::min(T, s0 + N));
            cfg.documents = std::make_shared<attn::Documents>(B, T, cu, true);
          } else {
            throw ValueError("bench: unknown mask '" + m + "' (causal, swa, scope, docsN, chunkN, sinkS)");
          }
          attn::LayerCost cost = attn::attention_cost(cfg, H, T, T, D);
          if (cfg.documents) {  // attention_cost counted all B sequences: per sequence, as for the others
            cost.visible_pairs /= B;
            cost.flops_fwd /= B;
            cost.flops_fwd_bwd /= B;
          }
          const bool grape = terms == "grape";
          const bool tc = attn::attn_tiles(cfg, dev, dt, D, T).tensor_core;
          // the kernels that run (fused.cpp's choice): cuDNN's where the call goes there (attention/backend.h)
          attn::AttnKernelParams P = attn::make_kernel_params(cfg, B, H, H, T, T, D);
          P.sink = terms.find("sink") != std::string::npos;
          P.fox = terms.find("fox") != std::string::npos;
          P.dist = grape;
          if (cfg.documents) P.doc_start = P.doc_end = &kAnyDocuments;  // any: the plan asks whether there are some
          const bool on_cudnn = gpu && attn::cudnn_compiled() && attn::cudnn_plan(P, dt).ok &&
                                (impl == "cudnn" || (impl == "auto" && attn::attention_backend() != attn::AttnBackend::Horizon));
          // (tensor_core_wg: on Hopper's wgmma, HZ_ATTN_MMA=wgmma; _wgo and _wgs: its forward
          // overlapped without a producer warpgroup and without overlap, HZ_ATTN_MMA=wgmma_overlap
          // and wgmma_serial; _1p: the one-pass backward, HZ_ATTN_BACKWARD=one_pass, LogN's c takes
          // no gradient here)
          const attn::WgmmaForward wf = attn::wgmma_forward();
          const std::string kernel =
              !gpu       ? "cpu"
              : on_cudnn ? "cudnn"
              : tc       ? std::string("tensor_core") +
                         (!attn::use_wgmma(P, dt, dev)                ? ""
                          : wf == attn::WgmmaForward::WarpSpecialized ? "_wg"
                          : wf == attn::WgmmaForward::Overlap         ? "_wgo"
                                                                      : "_wgs") +
                         (attn::one_pass_backward() ? "_1p" : "")
                         : "reference";
          Generator g(1);
          ag::Variable q(g.normal({B, H, T, D}, 0, 1, dt, dev), true), k(g.normal({B, H, T, D}, 0, 1, dt, dev), true),
              v(g.normal({B, H, T, D}, 0, 1, dt, dev), true);
          ag::Variable c(Tensor::ones({H}, DType::F32, dev));  // LogN's c
          attn::AttnTerms at;
          at.logn_c = cfg.logit == attn::LogitKind::LogN ? c : ag::Variable();
          if (terms.find("sink") != std::string::npos) at.sink = ag::Variable(Tensor::zeros({H}, DType::F32, dev), true);
          if (terms.find("fox") != std::string::npos)  // learned log f: its gradient is part of the backward
            at.forget = ag::Variable(g.uniform({B, H, T}, -0.1, 0.0, DType::F32, dev), true);
          if (grape) {  // learned rates: their gradients are part of the backward
            at.dist_q = ag::Variable(g.uniform({B, H, T}, 0.0, 0.05, DType::F32, dev), true);
            at.dist_k = ag::Variable(g.uniform({B, H, T}, 0.0, 0.05, DType::F32, dev), true);
          }
          const Tensor gout = g.normal({B, H, T, D}, 0, 1, dt, dev);
          std::vector<double> fwd, tot;
          int64_t peak = 0;
          for (int64_t r = gpu ? -1 : 0; r < reps; ++r) {  // on the GPU, one warm-up round
            q.zero_grad();
            k.zero_grad();
            v.zero_grad();
            sync();
            const int64_t base = memory_stats(dev).allocated;
            reset_peak_memory(dev);
            const auto t0 = std::chrono::steady_clock::now();
            attn::AttnOutput o = attn::fused_attention(q, k, v, cfg, at);
            const auto t1 = std::chrono::steady_clock::now();  // the CPU's forward (the GPU's runs on)
            o.out.backward(gout);  // on the GPU no sync between: the backward queues behind the forward
            sync();
            const auto t2 = std::chrono::steady_clock::now();
            peak = std::max(peak, memory_stats(dev).peak - base);
            if (r < 0) continue;
            if (!gpu) fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            tot.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
          }
          for (int64_t r = -1; gpu && r < reps; ++r) {  // the GPU's forward alone, as PyTorch's (no graph)
            ag::NoGradGuard no_grad;
            sync();
            const auto t0 = std::chrono::steady_clock::now();
            attn::AttnOutput o = attn::fused_attention(q, k, v, cfg, at);
            sync();
            if (r >= 0) fwd.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
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
          const double tf_f = cost.flops_fwd * B / (f_ms * 1e-3) / 1e12, tf_fb = cost.flops_fwd_bwd * B / (t_ms * 1e-3) / 1e12;
          if (terms == "none") plain_ms[m] = t_ms;
          const double vs = plain_ms.count(m) ? t_ms / plain_ms[m] : 0;  // fwd+bwd time over the same mask's without terms
          fmt::print("{:>6} {:>7} {:>15} {:>9} {:>14} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.0f}% {:>9.1f} {:>9.3f} "
                     "{:>9.3f} {:>8.3f}\n",
                     T, m, lg, terms, static_cast<int64_t>(pairs), pr, f_ms, t_ms, tr, pr > 0 ? 100 * tr / pr : 0,
                     peak / 1048576.0, tf_f, tf_fb, vs);
          std::fflush(stdout);
          if (jf)
            fmt::print(jf,
                       "{{\"impl\": \"horizon\", \"device\": \"{}\", \"dtype\": \"{}\", \"kernel\": \"{}\", \"D\": {}, "
                       "\"B\": {}, \"H\": {}, \"T\": {}, \"mask\": \"{}\", \"logit\": \"{}\", \"terms\": \"{}\", \"pairs\": {}, "
                       "\"fwd_ms\": {:.4f}, \"fwd_bwd_ms\": {:.4f}, \"tflops_fwd\": {:.4f}, \"tflops_fwd_bwd\": {:.4f}, "
                       "\"peak_mib\": {:.2f}}}\n",
                       device, dts, kernel, D, B, H, T, m, lg, terms,
                       static_cast<int64_t>(pairs), f_ms, t_ms, tf_f, tf_fb, peak / 1048576.0);
        }
      }
    }
  }
  if (jf) std::fclose(jf);
  return 0;
}

// A profiled step's rows (core/device.h) as a JSON member, and as a table on stderr: op, device,
// calls, milliseconds and share of the step's wall time (on a GPU the kernels' own time: the rest of
// the step is the host's, or the device idle).
std::string profile_json(const std::vector<ProfileRow>& rows, double step_ms) {
  std::string s = fmt::format(", \"profile_step_ms\": {:.3f}, \"profile\": [", step_ms);
  for (size_t k = 0; k < rows.size(); ++k)
    s += fmt::format("{}{{\"op\": \"{}\", \"device\": \"{}\", \"calls\": {}, \"ms\": {:.4f}}}", k ? ", " : "",
                     rows[k].name, rows[k].device, rows[k].calls, rows[k].ms);
  return s + "]";
}
void print_profile(const std::vector<ProfileRow>& rows, double step_ms) {
  double total = 0;
  int64_t calls = 0;
  for (const auto& r : rows) total += r.ms, calls += r.calls;
  fmt::print(stderr, "one step profiled: {:.2f} ms wall, {:.2f} ms in {} timed calls ({:.0f}%)\n", step_ms, total, calls,
             step_ms > 0 ? 100.0 * total / step_ms : 0.0);
  fmt::print(stderr, "| op | device | calls | ms | % of step |\n|---|---|---:|---:|---:|\n");
  for (const auto& r : rows)
    fmt::print(stderr, "| {} | {} | {} | {:.3f} | {:.1f} |\n", r.name, r.device, r.calls, r.ms,
               step_ms > 0 ? 100.0 * r.ms / step_ms : 0.0);
}

// Training throughput of a recipe's model on its run.device and run.precision: full steps
// (forward, backward, clip, AdamW) on random tokens over the whole vocabulary, with the recipe's
// train.recompute and train.loss_chunk, median step time, the phase times (the device is
// synchronised at each phase boundary), MFU, the peak memory (CUDA: the pool's since the warm-up;
// CPU: the allocator's high-water mark of the whole run, parameters and optimizer state included)
// next to the memory plan's prediction. With --max-gib G a run whose plan exceeds G GiB is not
// started: one {"skipped": ...} line says so. The PyTorch twin is scripts/bench/bench_train_torch.py;
// scripts/bench/bench_memory.sh sweeps lengths and recompute settings.
int bench_train(const std::vector<std::string>& a) {
  HZ_CHECK(a.size() >= 3, ValueError,
           "usage: horizon bench train RECIPE.yaml [--steps N] [--warmup N] [--max-gib G] [--profile] [key=value ...]");
  int64_t steps = 20, warmup = 3;
  double max_gib = 0;
  bool profile = false;
  std::vector<std::string> ov;
  for (size_t i = 3; i < a.size(); ++i) {
    if (a[i] == "--profile") profile = true;
    else if (a[i] == "--steps" && i + 1 < a.size()) steps = parse_int(a[++i], "--steps", 1, int64_t{1} << 30);
    else if (a[i] == "--warmup" && i + 1 < a.size()) warmup = parse_int(a[++i], "--warmup", 0, int64_t{1} << 30);
    else if (a[i] == "--max-gib" && i + 1 < a.size()) max_gib = parse_number(a[++i], "--max-gib", 0, 1e6);
    else ov.push_back(a[i]);
  }
  HZ_CHECK(steps >= 1 && warmup >= 0, ValueError, "bench train: --steps must be >= 1 and --warmup >= 0");
  const train::Recipe r = study::load_recipe(a[2], ov);
  auto local = dist::make_local();
  const Device dev = train::train_device(r, *local);
  if (dev.is_cuda()) cuda::set_allow_tf32(r.run.tf32);
  attn::set_exact_f32_attention(r.run.exact_f32_attention);
  cpu::set_flush_denormals(r.run.flush_denormals);
  reset_cpu_peak_memory();
  nn::Transformer m(r.model_config(), 1);
  const train::MemoryPlan plan = train::plan_memory(r, m, 1, dev.is_cpu() ? resident_outside_tensors() : 0);
  const std::string setting = fmt::format("\"T\": {}, \"B\": {}, \"recompute\": \"{}\", \"loss_chunk\": {}",
                                          r.data.seq_len, r.data.batch_size, nn::name(r.train.recompute),
                                          r.loss_chunk_rows());
  if (max_gib > 0 && static_cast<double>(plan.peak) > max_gib * 1073741824.0) {
    fmt::print("{{\"impl\": \"horizon\", {}, \"skipped\": \"plan {} exceeds {:.1f} GiB\", \"plan_bytes\": {}}}\n",
               setting, train::format_bytes(plan.peak), max_gib, plan.peak);
    return 0;
  }
  m.to(dev);
  m.compute_dtype = nn::compute_dtype_of(r.run.precision);
  m.loss_chunk = r.loss_chunk_rows();
  nn::AttnCall call;
  call.recompute = r.train.recompute;
  auto named = m.named_parameters();
  std::vector<std::pair<std::string, ag::Variable*>> decay, rest;
  for (auto& p : named) (p.second->dim() >= 2 ? decay : rest).push_back(p);
  optim::AdamW opt({{"decay", decay, r.optim.lr, r.optim.weight_decay}, {"no_decay", rest, r.optim.lr, 0.0}});
  const int64_t B = r.data.batch_size, T = r.data.seq_len, V = r.model.cfg.vocab_size;
  Generator g(1);
  std::vector<double> times, fwd, bwd, upd;
  uint64_t calls_fwd = 0, calls_bwd = 0, calls_upd = 0;  // backend calls (kernel launches) per phase, last step
  auto sync = [&] { synchronize(dev); };
  reset_peak_resident();
  std::vector<ProfileRow> rows;
  double profiled_ms = 0;
  for (int64_t i = 0; i < warmup + steps + (profile ? 1 : 0); ++i) {
    if (i == warmup && dev.is_cuda()) reset_peak_memory(dev);
    const Tensor u = g.uniform({B, T + 1}, 0, static_cast<double>(V), DType::F64);
    std::vector<double> v = u.to_vector();
    for (auto& x : v) x = std::floor(x);
    const Tensor ids = Tensor::from_vector(v, {B, T + 1}, DType::I64, dev);
    const Tensor in = ids.narrow(1, 0, T).contiguous(), tgt = ids.narrow(1, 1, T).contiguous();
    sync();
    // --profile: one step after the timed ones, each op timed on its device (core/device.h)
    if (profile && i == warmup + steps) profile_begin();
    using clk = std::chrono::steady_clock;
    const uint64_t c0 = backend_calls();
    const auto t0 = clk::now();
    ag::Variable loss = m.loss(in, tgt, Tensor(), call);
    sync();
    const auto t1 = clk::now();
    const uint64_t c1 = backend_calls();
    loss.backward();
    sync();
    const auto t2 = clk::now();
    const uint64_t c2 = backend_calls();
    // as the trainer steps: the clip's factor folded into the update
    opt.step(1.0, optim::clip_factor(optim::global_grad_norm(named), 1.0));
    m.zero_grad();
    sync();
    const auto t3 = clk::now();
    const uint64_t c3 = backend_calls();
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    if (i == warmup + steps) {  // the profiled step: its own numbers, not among the timed ones
      rows = profile_end();
      profiled_ms = sec(t0, t3) * 1e3;
      continue;
    }
    calls_fwd = c1 - c0;
    calls_bwd = c2 - c1;
    calls_upd = c3 - c2;
    if (i >= warmup) {
      times.push_back(sec(t0, t3));
      fwd.push_back(sec(t0, t1));
      bwd.push_back(sec(t1, t2));
      upd.push_back(sec(t2, t3));
    }
  }
  const double med = median(times);
  const double tps = B * T / med;
  const double flops = m.flops_per_token(T);
  const double peak = train::peak_tflops(r, dev);
  const int64_t mem = dev.is_cuda() ? memory_stats(dev).peak : cpu_memory_stats().peak;
  fmt::print("{{\"impl\": \"horizon\", {}, \"device\": \"{}\", \"precision\": \"{}\", \"params\": {}, "
             "\"step_ms\": {:.2f}, \"tok_per_s\": {:.1f}, \"threads\": {}, \"forward_ms\": {:.2f}, "
             "\"backward_ms\": {:.2f}, \"update_ms\": {:.2f}, \"flops_per_token\": {:.4g}, \"mfu\": {:.4f}, "
             "\"peak_mem_bytes\": {}, \"plan_bytes\": {}, \"process_peak_bytes\": {}, \"process_plan_bytes\": {}, "
             "\"outside_bytes\": {}, \"outside_after_bytes\": {}, \"gemm\": \"{}\", \"flush_denormals\": {}, \"omp_wait\": \"{}\", "
             "\"backend_calls\": {{\"forward\": {}, \"backward\": {}, \"update\": {}}}{}}}\n",
             setting, dev.str(), nn::name(r.run.precision), m.num_parameters(), med * 1e3, tps, cpu::num_threads(),
             median(fwd) * 1e3, median(bwd) * 1e3, median(upd) * 1e3, flops, peak > 0 ? tps * flops / (peak * 1e12) : 0.0,
             mem, plan.peak, peak_resident_bytes(), plan.process_peak_of(plan.peak), plan.outside, resident_outside_tensors(),
             r.run.precision == nn::Precision::BF16 ? cpu::gemm_setup().bf16 : cpu::gemm_setup().f32,
             cpu::flush_denormals() ? "true" : "false", cpu::omp_wait(), calls_fwd, calls_bwd, calls_upd, profile ? profile_json(rows, profiled_ms) : std::string());
  if (profile) print_profile(rows, profiled_ms);
  return 0;
}

// The optimizer step against the memory-bandwidth bound: AdamW over N f32 parameters (reads p, g,
// m, v and writes p, m, v: 28 bytes per parameter) next to a triad a = b + s c over buffers of the
// same total size (12 bytes per element), the practical bandwidth ceiling of this machine.
int bench_optimizer(const std::vector<std::string>& a) {
  int64_t n = 124000000, reps = 5;
  for (size_t i = 2; i + 1 < a.size(); i += 2) {
    if (a[i] == "--params") n = parse_int(a[i + 1], "--params", 1, int64_t{1} << 40);
    else if (a[i] == "--reps") reps = parse_int(a[i + 1], "--reps", 1, 1 << 20);
    else throw ValueError("bench optimizer: unknown option " + a[i]);
  }
  ag::Variable p(Tensor::zeros({n}, DType::F32), true, "p");
  Generator g(3);
  p.grad() = g.normal({n}, 0.0, 1.0);
  optim::AdamW opt({{"all", {{"p", &p}}, 1e-3, 0.1}});
  Tensor x = Tensor::zeros({n}), y = Tensor::ones({n}), z = Tensor::ones({n});
  std::vector<double> ta, tt;
  for (int64_t r = 0; r < reps + 1; ++r) {
    using clk = std::chrono::steady_clock;
    const auto t0 = clk::now();
    opt.step();
    const auto t1 = clk::now();
    float* xp = x.data<float>();
    const float* yp = y.data<float>();
    const float* zp = z.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) xp[i] = yp[i] + 0.5f * zp[i];
    const auto t2 = clk::now();
    if (r > 0) {
      ta.push_back(std::chrono::duration<double>(t1 - t0).count());
      tt.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
  }
  const double adam = median(ta), triad = median(tt);
  const double adam_gbs = 28.0 * n / adam / 1e9, triad_gbs = 12.0 * n / triad / 1e9;
  fmt::print("{{\"params\": {}, \"threads\": {}, \"adamw_ms\": {:.1f}, \"adamw_GBps\": {:.1f}, \"triad_ms\": {:.1f}, "
             "\"triad_GBps\": {:.1f}, \"adamw_bound_ms\": {:.1f}, \"of_bound\": {:.2f}}}\n",
             n, cpu::num_threads(), adam * 1e3, adam_gbs, triad * 1e3, triad_gbs, 28.0 * n / (triad_gbs * 1e9) * 1e3,
             28.0 * n / (triad_gbs * 1e9) / adam);
  return 0;
}

// The KV cache against recomputing every token by a full forward, per length.
int bench_generate(const std::vector<std::string>& a) {
  if (std::find(a.begin(), a.end(), "--help") != a.end() || a.size() < 3) {
    fmt::print("{}",
        "usage: horizon bench generate RECIPE.yaml|RUN_DIR [--lengths 256,512,1024,2048] [--new 16] [--reps 3]\n"
        "  Per length: prefill time of the prompt, median time per generated token with the KV cache,\n"
        "  the same token recomputed by a full forward (no cache), and the cache's memory next to a cache\n"
        "  that keeps every key. Runs alternate (cached, uncached, cached, ...) so machine noise hits both.\n");
    return a.size() < 3 ? 2 : 0;
  }
  const std::vector<std::string> rest(a.begin() + 1, a.end());
  const Flags f = parse_flags(rest, {"lengths", "new", "reps"}, {});
  HZ_CHECK(!f.positional.empty(), ValueError, "bench generate: give a recipe or a run directory");
  std::unique_ptr<nn::Transformer> owned;
  study::LoadedRun run;
  const std::string target = f.positional[0];
  const std::vector<std::string> ov(f.positional.begin() + 1, f.positional.end());
  train::Recipe recipe;
  if (target.size() > 5 && target.substr(target.size() - 5) == ".yaml") {
    recipe = study::load_recipe(target, ov);
    owned = std::make_unique<nn::Transformer>(recipe.model_config(), static_cast<uint64_t>(recipe.run.seed));
  } else {
    run = study::load_run(target, ov);
    recipe = run.recipe;
    owned = std::move(run.model);
  }
  nn::Transformer& m = *owned;
  std::vector<int64_t> lengths;
  {
    std::stringstream ss(f.get("lengths", "256,512,1024,2048"));
    std::string item;
    while (std::getline(ss, item, ',')) lengths.push_back(parse_int(item, "--lengths", 1, int64_t{1} << 24));
  }
  const int64_t n_new = f.geti("new", 16, 1, int64_t{1} << 24), reps = f.geti("reps", 3, 1, 1 << 20);
  const int64_t V = m.cfg.vocab_size;
  const auto inf = recipe.eval_options().inference;
  using clock = std::chrono::steady_clock;
  fmt::print("model: {} parameters, {} layers, d_model {}, heads {}/{}, trained at T = {}\n", m.num_parameters(),
             m.cfg.n_layers, m.cfg.d_model, m.cfg.n_heads, m.cfg.kv_heads(), recipe.data.seq_len);
  fmt::print("{:>8} {:>12} {:>14} {:>16} {:>8} {:>12} {:>14}\n", "length", "prefill ms", "cached ms/tok",
             "full fwd ms/tok", "speedup", "KV MiB", "KV MiB dense");
  for (int64_t L : lengths) {
    HZ_CHECK(L > n_new, ValueError, "bench generate: length ", L, " must exceed --new ", n_new);
    std::vector<int32_t> prompt(L - n_new);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 31 + 7) % std::min<int64_t>(V, 250));
    eval::ScopedInference si(m, inf, recipe.data.seq_len, L);
    std::vector<double> prefill, cached, full;
    int64_t kv = 0;
    const Device dev = m.device();
    auto settled = [&] {  // the clock stops once the device has finished
      synchronize(dev);
      return clock::now();
    };
    for (int64_t r = 0; r < reps; ++r) {
      {  // A: prefill + cached steps
        nn::KVCache cache(m, L, recipe.data.seq_len);
        kv = cache.bytes();
        auto t0 = settled();
        cache.prefill(prompt);
        prefill.push_back(std::chrono::duration<double>(settled() - t0).count());
        for (int64_t i = 0; i + 1 < n_new; ++i) {
          t0 = settled();
          cache.step(static_cast<int32_t>(i % 200));
          cached.push_back(std::chrono::duration<double>(settled() - t0).count());
        }
      }
      {  // B: one new token by recomputing the whole sequence (no cache)
        ag::NoGradGuard ng;
        std::vector<double> ids(prompt.begin(), prompt.end());
        ids.resize(L - 1, 5.0);
        nn::AttnCall call;
        call.T = L;
        call.train_len = recipe.data.seq_len;
        const auto t0 = settled();
        m.forward(Tensor::from_vector(ids, {1, L - 1}, DType::I64), Tensor(), call);
        full.push_back(std::chrono::duration<double>(settled() - t0).count());
      }
    }
    const int64_t dense = 2 * L * m.cfg.kv_heads() * m.cfg.hdim() * m.cfg.n_layers *
                          static_cast<int64_t>(dtype_size(m.cfg.dtype));
    const double c = median(cached), u = median(full);
    fmt::print("{:>8} {:>12.2f} {:>14.3f} {:>16.2f} {:>7.1f}x {:>12.3f} {:>14.3f}\n", L, 1e3 * median(prefill), 1e3 * c,
               1e3 * u, u / std::max(c, 1e-12), kv / 1048576.0, dense / 1048576.0);
    (void)V;
  }
  return 0;
}

}  // namespace

int bench_main(const std::vector<std::string>& args) {
  const bool help = std::find(args.begin(), args.end(), "--help") != args.end() ||
                    std::find(args.begin(), args.end(), "-h") != args.end();
  if (args.size() >= 2 && args[1] == "generate") return bench_generate(args);  // its own usage
  if (args.size() >= 2 && args[1] == "tokenizer") return bench_tokenizer_main(args);
  if (args.size() < 2 || help) {
    fmt::print("{}", "usage: horizon bench train RECIPE.yaml [--steps 20] [--warmup 3] [--max-gib G] [key=value ...]\n"
               "       horizon bench optimizer [--params 124000000] [--reps 5]\n"
               "       horizon bench attention [--device cpu|cuda] [--dtype f32|bf16|f64] [--impl auto|reference|tensor_core|cudnn]\n"
               "                               [--T 1024,2048,...] [--B 1] [--H 8] [--D 64] [--window 512] [--reps 3]\n"
               "                               [--block-q 0] [--block-k 0] [--masks causal,swa,scope,docsN,chunkN,sinkS]\n"
               "                               [--logits identity,scale_invariant,logn,swan_row,temperature]\n"
               "                               [--terms none,sink,fox,sink+fox,grape] [--json FILE]\n"
               "         (block 0: the device's tiles; cuda defaults: bf16, H = 2048/D, B = 16384/T, T up to 32768, 10 reps)\n"
               "       horizon bench generate RECIPE.yaml|RUN_DIR [...]   (horizon bench generate --help)\n"
               "       horizon bench tokenizer TOKENIZER DOCS.jsonl [...] (horizon bench tokenizer --help)\n");
    return args.size() < 2 ? 2 : 0;
  }
  if (args[1] == "attention") {
    const Flags f = parse_flags(args, {"device", "dtype", "impl", "T", "B", "H", "D", "window", "reps", "block-q",
                                       "block-k", "masks", "logits", "terms", "json"}, {}, 2);
    HZ_CHECK(f.positional.empty(), ValueError, "bench attention: unexpected argument '", f.positional.empty() ? "" : f.positional[0],
             "'; see horizon bench --help");
    return bench_attention(f);
  }
  if (args[1] == "train") return bench_train(args);
  if (args[1] == "optimizer") return bench_optimizer(args);
  throw ValueError("unknown benchmark '" + args[1] + "'; available: train, attention, optimizer, generate, tokenizer");
}

}  // namespace hz::cli
