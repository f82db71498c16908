#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "attention/accounting.h"
#include "attention/fused.h"
#include "core/device.h"
#include "core/hash.h"
#include "core/process.h"
#include "core/version.h"
#include "distributed/context/route.h"
#include "distributed/context/shard.h"
#include "distributed/grad_sync.h"
#include "distributed/parallel.h"
#include "distributed/zero.h"
#include "eval/eval.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/partition.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/context_parallel.h"
#include "train/memory_plan.h"
#include "train/run_dir.h"
#include "train/surgery.h"

namespace fs = std::filesystem;

namespace hz::train {

nn::ModelConfig model_config_at(const Recipe& r, int64_t step) {
  nn::ModelConfig c = r.model_config();
  // The drop happens at the start of step at_step, so a checkpoint taken after at_step steps
  // (step == at_step) still holds the model from before it.
  if (r.drope.at_step >= 0 && step > r.drope.at_step) c = drope_config(c, r.drope.qk_norm, r.drope);
  return c;
}

namespace {

uint64_t parameter_checksum(nn::Transformer& m) {
  uint64_t h = kFnvOffsetInit;
  for (auto& [name, v] : m.named_parameters()) {
    const Tensor t = v->value().to(Device::cpu()).contiguous();
    h = fnv1a64(t.raw_data(), t.numel() * dtype_size(t.dtype()), h);
  }
  return h;
}

// Rank 0's parameters to every rank, then every rank checks it holds the same bytes.
void sync_parameters(dist::Communicator& comm, nn::Transformer& m) {
  if (comm.size() == 1) return;
  for (auto& [name, v] : m.named_parameters()) comm.broadcast(v->value(), 0);
  const auto sums = comm.all_gather(static_cast<int64_t>(parameter_checksum(m)));
  for (int r = 1; r < comm.size(); ++r)
    HZ_CHECK(sums[r] == sums[0], ValueError, "rank ", r, " holds different parameters than rank 0 after the broadcast "
             "(checksum mismatch); the ranks built different models — check that every rank got the same recipe");
}

// The recipe's optimizer: AdamW on everything, or Muon on the hidden matrices and AdamW on the rest;
// sharded over the ranks (ZeRO-1) with parallel.shard_optimizer.
std::unique_ptr<optim::Optimizer> make_optimizer(const Recipe& r, nn::Transformer& m, double adam_lr,
                                                 dist::Communicator& comm) {
  auto named = m.named_parameters();
  std::vector<std::pair<std::string, ag::Variable*>> decay, no_decay;
  auto split_decay = [&](const std::vector<std::pair<std::string, ag::Variable*>>& ps) {
    for (const auto& p : ps) (p.second->dim() >= 2 ? decay : no_decay).push_back(p);
  };
  optim::OptimizerSpec adamw;
  adamw.adamw.beta1 = r.optim.beta1;
  adamw.adamw.beta2 = r.optim.beta2;
  adamw.adamw.eps = r.optim.eps;
  std::vector<optim::OptimizerSpec> specs;
  if (r.optim.name == OptimizerKind::Muon) {
    const optim::Partition part = optim::partition_for_muon(named);
    optim::OptimizerSpec muon;
    muon.kind = optim::OptimizerSpec::Kind::Muon;
    muon.muon.momentum = r.optim.muon_momentum;
    if (r.run.precision == nn::Precision::BF16) muon.muon.ns_dtype = DType::BF16;  // Newton-Schulz GEMMs in bf16, as the reference
    muon.groups = {{"hidden", part.hidden_matrices, r.optim.muon_lr, r.optim.weight_decay}};
    specs.push_back(muon);
    split_decay(part.rest);
  } else {
    split_decay(named);
  }
  adamw.groups = {{"decay", decay, adam_lr, r.optim.weight_decay}, {"no_decay", no_decay, adam_lr, 0.0}};
  specs.push_back(adamw);
  if (r.parallel.shard_optimizer) return std::make_unique<dist::ZeroOptimizer>(comm, std::move(specs));
  return optim::build(specs);
}

optim::ScheduleConfig schedule_of(const Recipe& r, int64_t warmup, int64_t total) {
  optim::ScheduleConfig s;
  s.kind = r.schedule.kind;
  s.warmup_steps = warmup;
  s.total_steps = std::max<int64_t>(1, total);
  s.min_ratio = r.schedule.min_ratio;
  s.decay_fraction = r.schedule.decay_fraction;
  return s;
}

// checkpoint.init_from: a Horizon run directory or step_<N>.h5 (weights by name), or another
// framework's model directory whose weights the caller hands over (TrainOptions::init_weights;
// study::train does for Hugging Face directories).
// A recipe may override fields of the directory's config (a Hugging Face config.json): say which, so
// a changed model is never silent (the recipe's model section, before SWAN / DroPE surgery).
void log_model_overrides(const std::string& config_file, const nn::ModelConfig& theirs, const nn::ModelConfig& ours,
                         RunDir& run) {
  Recipe a, b;
  a.model.cfg = theirs;
  b.model.cfg = ours;
  const YAML::Node ya = YAML::Load(to_yaml(a))["model"], yb = YAML::Load(to_yaml(b))["model"];
  auto flow = [](const YAML::Node& n) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    return std::string(e.c_str());
  };
  for (auto it = ya.begin(); it != ya.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    const std::string mine = flow(yb[key]), cfg = flow(it->second);
    if (mine != cfg) run.log("  model.{} = {} (the recipe) differs from {}: {}", key, mine, config_file, cfg);
  }
}

std::map<std::string, Tensor> load_init_weights(const std::string& from) {
  HZ_CHECK(fs::exists(from), ValueError, "checkpoint.init_from '", from, "' does not exist; give a Horizon run directory, a ",
           "step_<N>.h5 checkpoint, or a Hugging Face model directory (config.json + *.safetensors)");
  std::string path = from;
  if (fs::is_directory(from)) {
    HZ_CHECK(!fs::exists(from + "/config.json") || fs::exists(from + "/checkpoints") || fs::exists(from + "/config.yaml"),
             ValueError, "checkpoint.init_from '", from, "' holds a config.json: another framework's model, whose ",
             "weights train/ does not read; train through study::train (as `horizon train` does), which hands them over "
             "(TrainOptions::init_weights)");
    path = find_latest_checkpoint(fs::exists(from + "/checkpoints") ? from + "/checkpoints" : from);
    HZ_CHECK(!path.empty(), ValueError, "init_from: no checkpoint found in '", from, "'");
  }
  LoadOptions opt;
  opt.optimizer = false;  // the weights only
  return load_checkpoint(path, opt).model;
}

}  // namespace

// Dense peak of the device for the run's precision (TFLOP/s), 0 when unknown.
double peak_tflops(const Recipe& r, Device dev) {
  if (r.run.peak_tflops > 0) return r.run.peak_tflops;
  if (!dev.is_cuda()) return 0;
  const std::string name = cuda::device_name(dev.index);
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return r.run.precision == nn::Precision::BF16 ? 989.0 : r.run.tf32 ? 494.7 : 66.9;
  return 0;
}

Device train_device(const Recipe& r, const dist::Communicator& comm) {
  if (r.run.device == DeviceType::CPU) return Device::cpu();
  HZ_CHECK(cuda::compiled(), DeviceError, "run.device=cuda, but this Horizon build has no CUDA support; rebuild "
           "with -DHZ_CUDA=ON on a machine with the CUDA toolkit, or set run.device=cpu");
  const int n = cuda::device_count();
  HZ_CHECK(n > 0, DeviceError, "run.device=cuda, but no CUDA device is visible (check nvidia-smi and "
           "CUDA_VISIBLE_DEVICES), or set run.device=cpu");
  return Device::cuda(comm.local_rank() % n);
}

namespace {

// One training run: the setup (resume point, run directory, data, model, optimizer) in the
// constructor, then run() as the data flow of a step.
class Trainer {
 public:
  Trainer(const Recipe& r, const TrainOptions& opt)
      : r_(r), opt_(opt), local_(dist::make_local()), comm_(opt.comm ? *opt.comm : *local_), rank_(comm_.rank()),
        world_(comm_.size()), dims_(world_, rank_, static_cast<int>(r.parallel.context)),
        dev_(train_device(r, comm_)) {  // refuse a missing GPU before anything else
#ifdef _OPENMP
    if (r.run.threads > 0) omp_set_num_threads(static_cast<int>(r.run.threads));
#endif
    cpu::set_flush_denormals(r.run.flush_denormals);
    res_.run_dir = r.run.out_dir + "/" + r.run.name;
    // every rank looks for the resume point only once rank 0 has finished writing (a previous
    // run's last checkpoint may still be in progress on rank 0)
    if (rank_ == 0) lock_ = std::make_unique<RunLock>(res_.run_dir);  // one run per directory (rank 0 holds it)
    comm_.barrier();
    open_resume_point();
    run_ = std::make_unique<RunDir>(r, rank_ == 0, opt.quiet, start_);
    comm_.barrier();
    if (lock_ && !lock_->stale().empty())
      log("took over the stale lock {} of a run that is gone (host pid: {})", lock_->path(), lock_->stale());
    if (r_.checkpoint.resume == "latest")
      log(resume_path_.empty() ? "resume=latest: no checkpoint in {}, starting from step 0"
                               : "resume=latest: resuming from {}",
          resume_path_.empty() ? res_.run_dir + "/checkpoints" : resume_path_);
    build_context();
    build_data();
    build_model();
    build_optimizer();
    // the resume point's tensors are in the model and the optimizer now: holding them for the
    // whole run cost the checkpoint's size (the parameters and the optimizer state) again
    ck_.model.clear();
    ck_.optimizer.clear();
    plan_step();
    check_memory();
    log_header();
  }

  TrainResult run() {
    const auto t0 = std::chrono::steady_clock::now();
    t_log_ = t0;
    int64_t step = start_;
    for (; step < r_.train.steps; ++step) {
      if (opt_.stop_after >= 0 && step - start_ >= opt_.stop_after) break;
      if (r_.drope.at_step == step) drope(step);       // DroPE: drop every position encoding now
      if (opt_.before_step) opt_.before_step(step, rank_);  // e.g. fault injection
      const StepStats s = train_step(step);            // micro-batches -> all-reduce -> clip -> update
      record(step + 1, s);                             // losses, progress line, metrics.jsonl
      const int64_t done = step + 1;
      if (r_.eval.every > 0 && done % r_.eval.every == 0 && done != r_.train.steps) evaluate(done);
      if (r_.checkpoint.every > 0 && done % r_.checkpoint.every == 0 && done != r_.train.steps) save(done);
    }
    finish(step, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return res_;
  }

 private:
  struct StepStats {
    double loss = 0, grad_norm = 0, lr_mult = 0;
  };

  template <class... A>
  void log(const char* f, A&&... a) { run_->log(f, std::forward<A>(a)...); }

  void open_resume_point() {
    if (r_.checkpoint.resume == "latest") resume_path_ = find_latest_checkpoint(res_.run_dir + "/checkpoints");
    else if (!r_.checkpoint.resume.empty()) resume_path_ = r_.checkpoint.resume;
    if (resume_path_.empty()) return;
    ck_ = load_checkpoint(resume_path_);
    start_ = ck_.step;
    // a checkpoint's architecture is its own: the recipe resuming it may not change it
    if (ck_.meta.count("recipe"))
      check_architecture(parse_trained_recipe(ck_.meta.at("recipe"), resume_path_ + ":recipe"), r_,
                         "checkpoint.resume " + resume_path_);
    saved_world_ = ck_.counters.count("world_size") ? ck_.counters.at("world_size") : 1;
    saved_context_ = ck_.counters.count("parallel_context") ? ck_.counters.at("parallel_context") : 1;
    HZ_CHECK(saved_world_ >= 1 && saved_context_ >= 1 && saved_world_ % saved_context_ == 0, ValueError, resume_path_,
             ": its counters world_size=", saved_world_, " and parallel_context=", saved_context_,
             " do not describe a run (the context width must divide the world size): the checkpoint is damaged");
    // What each rank reads depends on the data-parallel replicas (world / parallel.context), not on the
    // context width: a run may change the width alone and go on with the same trajectory.
    const int64_t saved_dp = saved_world_ / saved_context_, dp = world_ / r_.parallel.context;
    HZ_CHECK(saved_dp == dp || r_.checkpoint.elastic, ValueError, resume_path_, " was written by a run with ", saved_dp,
             " data-parallel replica(s) (", saved_world_, " rank(s), parallel.context=", saved_context_,
             "); this run has ", dp, " (", world_, " rank(s), parallel.context=", r_.parallel.context,
             "). Each replica's loader cursor covers its own shard of the data, so another number would not continue "
             "the same trajectory: resume with ", saved_dp, " replica(s) (mpirun -np ", saved_dp * r_.parallel.context,
             " with parallel.context=", r_.parallel.context, "), or set checkpoint.elastic=true (the data go on from the "
             "same global position)");
  }

  // A counter the resume needs, refused by name when the checkpoint lacks it.
  int64_t counter(const std::string& key) const {
    const auto it = ck_.counters.find(key);
    HZ_CHECK(it != ck_.counters.end(), ValueError, resume_path_, ": the checkpoint has no counter '", key,
             "' (the data loader's position), so the run cannot continue its data order; resume a checkpoint written by "
             "horizon train, or start from its weights with checkpoint.init_from");
    return it->second;
  }

  void build_data() { data_ = open_train_data(r_, comm_, !opt_.quiet); }  // train/data.h

  // parallel.context: groups of N consecutive ranks share each sequence (distributed/parallel.h),
  // every layer attending through the group (distributed/context/route.h)
  void build_context() {
    context_comm_ = dist::context_group(comm_, dims_);
    if (context_comm_)
      context_ = std::make_shared<dist::ContextRoute>(*context_comm_, r_.data.seq_len, r_.parallel.context_exchange);
  }

  void build_model() {
    model_ = std::make_unique<nn::Transformer>(model_config_at(r_, start_), static_cast<uint64_t>(r_.run.seed),
                                               /*draw_weights=*/resume_path_.empty());  // a resume loads every one
    if (!resume_path_.empty()) {
      model_->load_state_dict(ck_.model, /*strict=*/true, resume_path_);
      if (saved_world_ / saved_context_ == dims_.data()) {
        // the same replicas: this rank reads what the first rank of its replica read before
        const std::string key = "loader/rank" + std::to_string(int64_t{dims_.data_rank()} * saved_context_);
        data_.restore({counter(key + "/epoch"), counter(key + "/index")});
      } else {  // checkpoint.elastic: every rank's cursor was the same; go on from its global position
        data_.restore_resharded({counter("loader/rank0/epoch"), counter("loader/rank0/index")},
                                saved_world_ / saved_context_, dims_.data());
        log("checkpoint.elastic: {} was written by {} rank(s), resumed by {}", resume_path_, saved_world_, world_);
      }
      data_.set_micro(start_ * r_.train.grad_accum);  // the retrieval mixture's position
      res_.tokens_seen = ck_.tokens_seen;
      log("resumed from {} at step {}", resume_path_, start_);
    } else if (!r_.checkpoint.init_from.empty()) {
      const SurgeryReport rep = load_weights(*model_, init_weights(), r_.checkpoint.init_from);
      log("init_from {}: {} parameters loaded, {} new (kept their initialisation), {} dropped", r_.checkpoint.init_from,
          rep.loaded.size(), rep.added.size(), rep.dropped.size());
      for (const auto& n : rep.added) log("  new:     {}", n);
      for (const auto& n : rep.dropped) log("  dropped: {}", n);
    }
    if (dev_.is_cuda()) {
      cuda::set_allow_tf32(r_.run.tf32);
      attn::set_exact_f32_attention(r_.run.exact_f32_attention);
    }
    place(*model_);
    if (dev_.is_cuda()) {
      // f32 attention: the tensor cores on bf16 pairs where they take the head dim, else exact f32
      const bool f32 = r_.run.precision == nn::Precision::FP32 && model_->cfg.dtype == DType::F32;
      const bool split = f32 && attn::attn_tiles(attn::AttnConfig{}, dev_, DType::F32, model_->cfg.hdim()).tensor_core;
      // the environment's kernel choices (attention/fused.h, tensor_core_options)
      const std::string opts = attn::tensor_core_options(dev_, f32 ? DType::F32 : DType::BF16, model_->cfg.hdim());
      log("device {}: {}, precision {}{}{}{}", dev_.str(), cuda::device_name(dev_.index), nn::name(r_.run.precision),
          r_.run.tf32 ? " (TF32 GEMMs)" : "",
          !f32 ? "" : split ? ", attention on the tensor cores (f32 as bf16 pairs)" : ", attention in exact f32 (reference kernels)",
          opts.empty() ? "" : ", Horizon's attention kernels: " + opts);
      attn::set_attention_backend(r_.run.attention_backend);
      for (const auto& [kind, route] : r_.attention_routes()) log("layer kind {}: {}", kind, route.describe());
    }
    else if (r_.run.precision == nn::Precision::BF16)
      log("device cpu, precision bf16");
  }

  // checkpoint.init_from's weights: a Horizon run or checkpoint's, or what the caller's
  // TrainOptions::init_weights gives for another framework's directory (mapped onto the run's model)
  std::map<std::string, Tensor> init_weights() {
    if (!opt_.init_weights) return load_init_weights(r_.checkpoint.init_from);
    ForeignWeights fw = opt_.init_weights(model_->cfg);
    log("init_from {}: {}", r_.checkpoint.init_from, fw.summary);
    log_model_overrides(fw.config_file, fw.config, r_.model.cfg, *run_);
    return std::move(fw.weights);
  }

  // parameters on the run's device, forward at its precision
  void place(nn::Transformer& m) const {
    m.to(dev_);
    m.compute_dtype = nn::compute_dtype_of(r_.run.precision);
    m.loss_chunk = r_.loss_chunk_rows();
  }

  void build_optimizer() {
    const bool after_reset = r_.drope.at_step >= 0 && r_.drope.reset_optimizer && start_ > r_.drope.at_step;
    adam_lr_ = after_reset ? r_.drope.lr : r_.optim.lr;
    sched_origin_ = after_reset ? r_.drope.at_step : 0;
    sched_ = after_reset ? schedule_of(r_, r_.drope.warmup_steps, r_.train.steps - r_.drope.at_step)
                         : schedule_of(r_, r_.schedule.warmup_steps, r_.train.steps);
    optimizer_ = make_optimizer(r_, *model_, adam_lr_, comm_);
    if (!resume_path_.empty()) optimizer_->load_state_dict(ck_.optimizer);
    sync_parameters(comm_, *model_);
    make_sync();
  }

  void make_sync() {
    if (gsync_) comm_before_ += gsync_->comm_seconds();  // of a GradSync replaced by surgery
    const int64_t bucket_bytes = opt_.bucket_bytes > 0 ? opt_.bucket_bytes : r_.train.bucket_mb << 20;
    if (world_ > 1)
      gsync_ = std::make_unique<dist::GradSync>(comm_, model_->named_parameters(), bucket_bytes, r_.train.overlap_comm);
  }

  // what a step costs: tokens, FLOPs, the memory plan
  void plan_step() {
    tokens_per_step_ = r_.data.batch_size * r_.data.seq_len * r_.train.grad_accum * dims_.data();
    peak_ = peak_tflops(r_, dev_);
    model_flops_ = model_->flops_per_token(r_.data.seq_len);
    // on the CPU the plan also predicts the process's resident peak (what top shows), from what it
    // holds outside its tensors now, before the first step
    plan_ = plan_memory(r_, *model_, world_, dev_.is_cpu() ? resident_outside_tensors() : 0);
    res_.mem_plan = plan_.peak;
    res_.rss_plan = plan_.process_peak();
  }

  // a run whose plan does not fit the GPU's free memory is refused before its first step; the
  // allocator's high-water mark starts here
  void check_memory() {
    if (dev_.is_cuda()) {
      // free memory (not the card's total): other processes and the CUDA context are taken out
      const int64_t have = cuda::memory_usable(dev_.index);
      HZ_CHECK(plan_.run_peak() <= have, ValueError, "this run needs about ", format_bytes(plan_.run_peak()), " on ", dev_.str(),
               " (parameters ", format_bytes(plan_.parameters), ", optimizer state ", format_bytes(plan_.optimizer),
               ", activations ", format_bytes(plan_.activations), ", logits ", format_bytes(plan_.logits),
               ", evaluation ", format_bytes(plan_.eval), ") but ",
               format_bytes(have), " of the GPU's ", format_bytes(cuda::memory_bytes(dev_.index)),
               " are free for it: set train.recompute=layer, a smaller data.batch_size (with "
               "train.grad_accum), train.loss_chunk, parallel.shard_optimizer=true over more ranks, or for the "
               "evaluation shorter eval.lengths or a smaller eval.batch_size (horizon info RECIPE prints the plan)");
      reset_peak_memory(dev_);
    } else {
      reset_cpu_peak_memory();
      reset_peak_resident();
    }
  }

  void log_header() {
    if (dev_.is_cpu())
      for (const std::string& line : cpu::runtime_report(true)) log("{}", line);
    log("run {}: {} parameters, {} layers [{}], {} steps", r_.run.name, model_->num_parameters(), r_.model.cfg.n_layers,
        fmt::format("{}", fmt::join(model_->cfg.layer_kind_names(), ", ")), r_.train.steps);
    log("global batch = {} sequences/rank x {} accumulation x {} rank(s) = {} sequences of {} tokens = {} tokens/step{}",
        r_.data.batch_size, r_.train.grad_accum, world_, r_.data.batch_size * r_.train.grad_accum * world_,
        r_.data.seq_len, tokens_per_step_,
        world_ > 1 ? fmt::format(" ({} communicator, {} gradient buckets, overlap {})", comm_.name(),
                                 gsync_->num_buckets(), r_.train.overlap_comm ? "on" : "off")
                   : std::string());
    log("memory plan per rank: {} predicted peak (parameters {}, optimizer {}, activations {}, backward {}, logits {}){}",
        format_bytes(plan_.peak), format_bytes(plan_.parameters), format_bytes(plan_.optimizer),
        format_bytes(plan_.activations), format_bytes(plan_.backward), format_bytes(plan_.logits),
        plan_.eval > 0 ? fmt::format("; evaluation {} ({} tokens a batch, no gradients)", format_bytes(plan_.eval),
                                     plan_.eval_tokens)
                       : std::string("; no evaluation"));
    if (plan_.outside > 0)
      log("the process: {} predicted resident peak ({} outside the tensors now, allocator reserve {})",
          format_bytes(plan_.process_peak()), format_bytes(plan_.outside), format_bytes(plan_.reserve_of(plan_.run_peak())));
    if (const auto* z = dynamic_cast<const dist::ZeroOptimizer*>(optimizer_.get()))
      log("optimizer state sharded over {} rank(s) (ZeRO-1): {:.1f} MiB on this rank of {:.1f} MiB in all", world_,
          z->state_bytes(rank_) / 1048576.0, z->state_bytes(-1) / 1048576.0);
  }

  void drope(int64_t step) {
    const DropeOutcome d = apply_drope(r_.drope, static_cast<uint64_t>(r_.run.seed), adam_lr_, model_, optimizer_,
                                       [&](nn::Transformer& m, double lr) {
                                         place(m);  // a rebuilt model starts on the CPU
                                         return make_optimizer(r_, m, lr, comm_);
                                       });
    if (d.rebuilt) {
      make_sync();
      plan_ = plan_memory(r_, *model_, world_, plan_.outside);  // QK-norm added
      res_.mem_plan = std::max(res_.mem_plan, plan_.peak);
      res_.rss_plan = std::max(res_.rss_plan, plan_.process_peak());
      log("DroPE at step {}: position encodings dropped, QK-norm added ({} new parameters)", step, d.new_params);
    } else {
      log("DroPE at step {}: position encodings dropped", step);
    }
    if (r_.drope.reset_optimizer) {
      adam_lr_ = r_.drope.lr;
      sched_origin_ = step;
      sched_ = schedule_of(r_, r_.drope.warmup_steps, r_.train.steps - step);
    }
  }

  StepStats train_step(int64_t step) {
    StepStats s;
    double loss_sum = 0;
    for (int64_t micro = 0; micro < r_.train.grad_accum; ++micro) {
      const data::Batch whole = data_.next();
      nn::AttnCall call;
      call.documents = attn::Documents::of_batch(whole.tokens.size(0), whole.tokens.size(1), whole.cu_seqlens, docs_);
      call.recompute = r_.train.recompute;
      call.route = context_;
      const data::Batch b = context_ ? dist::shard_batch(whole, context_->layout()) : whole;
      // drawn positions (train.positions): a function of the micro-batch count and the global row, so
      // a resume continues them; the context-parallel ranks of a sequence share its row
      const data::PositionOptions& po = r_.train.positions;
      const Tensor pos = po.scheme == data::PositionScheme::Index
                             ? Tensor()
                             : data::make_positions(po, whole.tokens.size(0), whole.tokens.size(1),
                                                    static_cast<uint64_t>(r_.run.seed), step * r_.train.grad_accum + micro,
                                                    int64_t{dims_.data_rank()} * whole.tokens.size(0));
      ag::Variable loss = model_->loss(b.tokens, b.targets, b.weights, call, pos);
      if (context_) {  // this rank's mean, weighted so that the group's average is the sequence's mean
        const double here = loss_weight(b.targets, b.weights);
        const double all = context_comm_->all_reduce_scalar(here, ReduceOp::Sum);
        loss = ag::mul_scalar(loss, all > 0 ? context_->layout().n * here / all : 0.0);
      }
      // read after the backward is queued: on a GPU, reading it here would hold the host until the
      // forward's kernels finish, with none of the backward's queued behind them
      const Tensor value = loss.value();
      if (r_.train.grad_accum > 1) loss = ag::mul_scalar(loss, 1.0 / r_.train.grad_accum);
      if (gsync_ && micro == r_.train.grad_accum - 1) gsync_->begin();  // sync on the last micro-batch only
      loss.backward();
      loss_sum += value.item();
    }
    if (gsync_) gsync_->finish();  // gradients are now the average over ranks
    s.loss = comm_.all_reduce_scalar(loss_sum / r_.train.grad_accum, ReduceOp::Mean);
    HZ_CHECK(std::isfinite(s.loss), ValueError, "loss became ", s.loss, " at step ", step,
             "; lower optim.lr or enable optim.grad_clip");
    auto params = model_->named_parameters();
    s.grad_norm = optim::global_grad_norm(params);
    HZ_CHECK(std::isfinite(s.grad_norm), ValueError, "gradient norm became ", s.grad_norm, " at step ", step,
             "; lower optim.lr or enable optim.grad_clip");
    s.lr_mult = optim::lr_multiplier(sched_, step - sched_origin_);
    // the clip's factor is applied as the optimizer reads the gradients (no pass of its own)
    optimizer_->step(s.lr_mult, optim::clip_factor(s.grad_norm, r_.optim.grad_clip));
    model_->zero_grad();
    res_.mem_peak = std::max(res_.mem_peak, allocator_peak());
    if (opt_.on_step) opt_.on_step(step + 1, *model_);
    return s;
  }

  void record(int64_t done, const StepStats& s) {
    res_.losses.push_back(s.loss);
    res_.tokens_seen += tokens_per_step_;
    tokens_since_log_ += tokens_per_step_;
    if (done % r_.train.log_every != 0 && done != r_.train.steps) return;
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - t_log_).count();
    const double tps = tokens_since_log_ / std::max(dt, 1e-9);
    const double eta = (r_.train.steps - done) * tokens_per_step_ / std::max(tps, 1e-9);
    // model FLOPs per device: every rank computes its share of the tokens
    const double mfu = peak_ > 0 ? tps / world_ * model_flops_ / (peak_ * 1e12) : 0.0;
    std::string extra, jextra;
    if (dev_.is_cuda()) {
      const DeviceMemoryStats ms = memory_stats(dev_);
      const int64_t peak = std::max(res_.mem_peak, ms.peak);  // the steps'; evaluation's apart
      extra = fmt::format("  mem {:.2f}/{:.2f} GiB (plan {:.2f}{})", peak / 1073741824.0, ms.reserved / 1073741824.0,
                          plan_.peak / 1073741824.0,
                          eval_mem_peak_ > 0 ? fmt::format(", eval {:.2f}", eval_mem_peak_ / 1073741824.0) : std::string());
      jextra = fmt::format(", \"gpu_mem_peak\": {}, \"gpu_mem_reserved\": {}, \"mem_plan\": {}", peak, ms.reserved,
                           plan_.peak);
      if (eval_mem_peak_ > 0) jextra += fmt::format(", \"eval_mem_peak_max\": {}", eval_mem_peak_);  // the evaluations' highest so far
    } else {  // the CPU allocator's high-water mark since the start (train_step), the highest rank's, next to the plan
      const std::vector<int64_t> all = world_ > 1 ? comm_.all_gather(res_.mem_peak) : std::vector<int64_t>{res_.mem_peak};
      const int64_t peak = *std::max_element(all.begin(), all.end());
      // the steps' peak against a step's plan; evaluation's apart (rank 0 evaluates)
      // and this rank's resident peak (what top shows) next to the plan's for the process
      res_.rss_peak = std::max(res_.rss_peak, peak_resident_bytes());
      extra = fmt::format("  mem {} (plan {}{}), process {} (plan {})", format_bytes(peak), format_bytes(plan_.peak),
                          eval_mem_peak_ > 0 ? ", eval " + format_bytes(eval_mem_peak_) : std::string(),
                          format_bytes(res_.rss_peak), format_bytes(plan_.process_peak()));
      jextra = fmt::format(", \"mem_peak\": {}, \"mem_plan\": {}, \"rss_peak\": {}, \"rss_plan\": {}", peak, plan_.peak,
                           res_.rss_peak, plan_.process_peak());
      if (eval_mem_peak_ > 0) jextra += fmt::format(", \"eval_mem_peak_max\": {}", eval_mem_peak_);  // the evaluations' highest so far
    }
    if (context_) {  // k/v bytes the busiest rank of the group sent per step (forward and backward)
      const int64_t steps = std::max<int64_t>(1, tokens_since_log_ / std::max<int64_t>(1, tokens_per_step_));
      const std::vector<int64_t> sent = context_comm_->all_gather((context_->bytes_sent() - context_bytes_logged_) / steps);
      context_bytes_logged_ = context_->bytes_sent();
      jextra += fmt::format(", \"context_bytes\": {}", *std::max_element(sent.begin(), sent.end()));
    }
    if (peak_ > 0) {
      extra += fmt::format("  MFU {:.1f}%", 100 * mfu);
      jextra += fmt::format(", \"mfu\": {:.4f}", mfu);
    }
    log("step {:>6}/{}  loss {:.4f}  lr {:.3e}  grad_norm {:.3f}  {:.0f} tok/s{}  ETA {:.0f}s", done, r_.train.steps,
        s.loss, adam_lr_ * s.lr_mult, s.grad_norm, tps, extra, eta);
    run_->metrics(fmt::format("{{\"step\": {}, \"loss\": {:.6f}, \"lr\": {:.6e}, \"grad_norm\": {:.6f}, \"tokens\": {}, "
                              "\"tok_per_s\": {:.1f}{}}}",
                              done, s.loss, adam_lr_ * s.lr_mult, s.grad_norm, res_.tokens_seen, tps, jextra));
    t_log_ = now;
    tokens_since_log_ = 0;
  }

  int64_t allocator_peak() const { return dev_.is_cuda() ? memory_stats(dev_).peak : cpu_memory_stats().peak; }

  // held-out loss at every eval length (rank 0); returns the loss at the training length. Its
  // memory is kept apart from the steps' (the plan is a step's): the steps' high-water mark so far
  // is taken before, evaluation's after, and the mark restarts from what is allocated.
  double evaluate(int64_t step_done) {
    if (!data_.val || rank_ != 0) return std::nan("");
    res_.mem_peak = std::max(res_.mem_peak, allocator_peak());
    if (dev_.is_cuda()) reset_peak_memory(dev_);  // the evaluation's own high-water mark, apart from the steps'
    else reset_cpu_peak_memory();
    const int64_t eb = r_.eval.opts.batch_size > 0 ? r_.eval.opts.batch_size : r_.data.batch_size;
    std::string line = fmt::format("{{\"step\": {}, \"eval\": {{", step_done);
    double at_train = std::nan("");
    bool first = true;
    evaluated_.clear();
    for (int64_t L : r_.eval_lengths()) {
      const double l = eval::mean_loss(*model_, *data_.val, L, eb, r_.eval.opts.batches, r_.data.seq_len, docs_);
      if (std::isnan(l)) {
        log("  eval step {:>6}  length {:>6}  skipped: the validation split holds no batch of {} x {}", step_done, L, eb, L);
        continue;
      }
      if (L == r_.data.seq_len) at_train = l;
      evaluated_.emplace_back(L, l);
      line += fmt::format("{}\"{}\": {{\"loss\": {:.6f}, \"ppl\": {:.4f}}}", first ? "" : ", ", L, l, std::exp(l));
      log("  eval step {:>6}  length {:>6}  loss {:.4f}  ppl {:.3f}", step_done, L, l, std::exp(l));
      first = false;
    }
    const int64_t eval_peak = allocator_peak();
    log("  eval step {:>6}  memory peak {} (plan {})", step_done, format_bytes(eval_peak), format_bytes(plan_.eval));
    run_->metrics(line + fmt::format("}}, \"eval_mem_peak\": {}, \"eval_mem_plan\": {}}}", eval_peak, plan_.eval));
    eval_mem_peak_ = std::max(eval_mem_peak_, eval_peak);
    res_.eval_mem_peak = eval_mem_peak_;
    res_.eval_mem_plan = plan_.eval;
    if (dev_.is_cuda()) reset_peak_memory(dev_);
    else reset_cpu_peak_memory();
    return at_train;
  }

  void save(int64_t step_done) {
    const data::LoaderCursor cur = data_.cursor();
    const auto epochs = comm_.all_gather(cur.epoch), indices = comm_.all_gather(cur.index);  // every rank's cursor
    CheckpointData c;
    // a sharded optimizer's state is gathered on rank 0 (collective); the checkpoint holds it whole
    if (auto* z = dynamic_cast<const dist::ZeroOptimizer*>(optimizer_.get())) z->state_dict_on(0, c.optimizer);
    else if (rank_ == 0) optimizer_->state_dict(c.optimizer);
    if (rank_ != 0) return;
    c.step = step_done;
    c.tokens_seen = res_.tokens_seen;
    c.model = model_->state_dict();
    for (int q = 0; q < world_; ++q) {
      c.counters["loader/rank" + std::to_string(q) + "/epoch"] = epochs[q];
      c.counters["loader/rank" + std::to_string(q) + "/index"] = indices[q];
    }
    c.counters["world_size"] = world_;
    c.counters["parallel_context"] = r_.parallel.context;
    c.counters["rng/seed"] = r_.run.seed;
    c.meta["recipe"] = to_yaml(r_);
    c.meta["horizon_version"] = version();
    run_->save(step_done, c, r_.checkpoint.keep_last);
  }

  void finish(int64_t step, double secs) {
    res_.start_step = start_;
    res_.end_step = step;
    res_.tokens_per_second = (step - start_) * tokens_per_step_ / std::max(secs, 1e-9);
    res_.seconds = secs;
    res_.comm_seconds = comm_before_ + (gsync_ ? gsync_->comm_seconds() : 0.0);
    if (world_ > 1)
      log("communication: {:.2f} s of {:.2f} s ({:.1f}%) in gradient all-reduces", res_.comm_seconds, secs,
          100 * res_.comm_seconds / std::max(secs, 1e-9));
    if (const auto* z = dynamic_cast<const dist::ZeroOptimizer*>(optimizer_.get()); z && world_ > 1)
      log("communication: {:.2f} s in the sharded optimizer's parameter all-gathers and state gathers", z->comm_seconds());
    if (step != r_.train.steps) return;  // stopped early (stop_after): no final evaluation or checkpoint
    res_.final_val_loss = r_.eval.final ? evaluate(step) : std::nan("");
    save(step);
    log("done: {} steps, {:.0f} tok/s, final val loss {}", step - start_, res_.tokens_per_second, final_words());
  }

  // The final evaluation in words: the loss at the training length, or why there is none and what
  // was evaluated instead (eval.lengths may leave data.seq_len out).
  std::string final_words() const {
    if (!std::isnan(res_.final_val_loss)) return fmt::format("{:.4f}", res_.final_val_loss);
    if (!r_.eval.final) return "n/a (eval.final false)";
    if (!data_.val) return "n/a (no validation split)";
    std::string at;
    for (const auto& [L, l] : evaluated_) at += fmt::format("{}{} at length {}", at.empty() ? "" : ", ", fmt::format("{:.4f}", l), L);
    const auto& lengths = r_.eval_lengths();
    if (std::find(lengths.begin(), lengths.end(), r_.data.seq_len) == lengths.end())
      return fmt::format("n/a at the training length {} (eval.lengths {} leave it out); evaluated: {}", r_.data.seq_len,
                         fmt::format("[{}]", fmt::join(lengths, ", ")), at.empty() ? std::string("none") : at);
    return fmt::format("n/a (the validation split holds no batch at length {}){}", r_.data.seq_len,
                       at.empty() ? std::string() : "; evaluated: " + at);
  }

  std::vector<std::pair<int64_t, double>> evaluated_;  // the last evaluation's (length, loss), rank 0
  const Recipe& r_;
  const TrainOptions& opt_;
  std::unique_ptr<dist::Communicator> local_;
  dist::Communicator& comm_;
  const int rank_, world_;
  const dist::ParallelDims dims_;  // data-parallel replicas x context-parallel groups
  const Device dev_;
  TrainResult res_;
  std::string resume_path_;
  CheckpointData ck_;
  int64_t start_ = 0, saved_world_ = 1, saved_context_ = 1, context_bytes_logged_ = 0;
  int64_t eval_mem_peak_ = 0;  // the allocator's high-water mark inside in-run evaluations
  const attn::DocumentOptions docs_{r_.data.documents, r_.data.position_reset};
  std::unique_ptr<RunLock> lock_;  // declared before run_: released after it
  std::unique_ptr<RunDir> run_;
  TrainData data_;
  std::unique_ptr<nn::Transformer> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<dist::GradSync> gsync_;
  std::unique_ptr<dist::Communicator> context_comm_;  // this rank's context-parallel group
  std::shared_ptr<dist::ContextRoute> context_;  // the group as every layer's route
  double adam_lr_ = 0, comm_before_ = 0, peak_ = 0, model_flops_ = 0;
  int64_t sched_origin_ = 0, tokens_per_step_ = 0, tokens_since_log_ = 0;
  optim::ScheduleConfig sched_;
  MemoryPlan plan_;
  std::chrono::steady_clock::time_point t_log_;
};

}  // namespace

TrainResult train(const Recipe& r, const TrainOptions& opt) { return Trainer(r, opt).run(); }

std::function<void(int64_t, int)> fault_injection_from_env() {
  const char* fault_rank = std::getenv("HZ_FAULT_RANK");
  const char* fault_step = std::getenv("HZ_FAULT_STEP");
  if (!fault_rank || !fault_step) return {};
  const int frank = std::atoi(fault_rank);
  const int64_t fstep = std::atoll(fault_step);
  const char* sig = std::getenv("HZ_FAULT_SIGNAL");
  const bool kill = sig && std::string(sig) == "1";
  return [frank, fstep, kill](int64_t step, int rank) {
    if (rank != frank || step != fstep) return;
    if (kill) std::raise(SIGKILL);
    throw Error(fmt::format("injected fault at step {} (HZ_FAULT_RANK={}, HZ_FAULT_STEP={})", step, rank, step));
  };
}

}  // namespace hz::train
