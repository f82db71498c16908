#include "train/trainer.h"

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
#include "core/cuda/runtime.h"
#include "data/corpus.h"
#include "distributed/grad_sync.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "eval/eval.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/partition.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/hf.h"
#include "train/surgery.h"

namespace fs = std::filesystem;

namespace hz::train {

nn::ModelConfig model_config_at(const Recipe& r, int64_t step) {
  nn::ModelConfig c = r.model_config();
  // The drop happens at the start of step at_step, so a checkpoint taken after at_step steps
  // (step == at_step) still holds the model from before it.
  if (r.drope.at_step >= 0 && step > r.drope.at_step) c = drope_config(c, r.drope.qk_norm);
  return c;
}

namespace {

// Console + train.log.
class Log {
 public:
  // Only rank 0 logs (enabled); the others stay silent.
  Log(const std::string& path, bool quiet, bool append, bool enabled) : quiet_(quiet || !enabled), enabled_(enabled) {
    if (enabled) f_.open(path, append ? std::ios::app : std::ios::trunc);
  }
  template <class... A>
  void operator()(const char* f, A&&... a) {
    if (!enabled_) return;
    const std::string s = fmt::format(fmt::runtime(f), std::forward<A>(a)...);
    if (!quiet_) fmt::print("{}\n", s);
    f_ << s << "\n";
    f_.flush();
  }

 private:
  std::ofstream f_;
  bool quiet_, enabled_;
};

uint64_t parameter_checksum(nn::Transformer& m) {
  uint64_t h = 1469598103934665603ull;
  for (auto& [name, v] : m.named_parameters()) {
    const Tensor t = v->value().to(Device::cpu()).contiguous();
    const unsigned char* p = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.numel() * dtype_size(t.dtype()); ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
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

// Training data behind one interface: shards (bible / files) or synthetic retrieval.
struct TrainData {
  std::unique_ptr<data::Loader> shard_loader;
  std::unique_ptr<data::SyntheticLoader> synth;
  std::shared_ptr<const data::Shard> val;
  data::Batch next() { return shard_loader ? shard_loader->next() : synth->next(); }
  data::LoaderCursor cursor() const { return shard_loader ? shard_loader->cursor() : synth->cursor(); }
  void restore(const data::LoaderCursor& c) {
    if (shard_loader) shard_loader->restore(c);
    else synth->restore(c);
  }
};

// <out_dir>/_data/<source>-<tokenizer tag>[-<corpus hash>]-s<seed>-v<val_fraction>: the tokenizer
// tag holds a hash of the tokenizer file, the corpus hash one of the fields that choose the
// documents (file globs, text field, token format), so changing either prepares new shards.
std::string cache_dir(const Recipe& r, const data::Tokenizer& tok) {
  if (!r.data.cache_dir.empty()) return r.data.cache_dir;
  std::string corpus;
  if (r.data.source != "bible") {
    std::string key = r.data.source + "\n" + r.data.text_field + "\n" + r.data.token_format;
    for (const auto& f : r.data.files) key += "\nf:" + f;
    for (const auto& f : r.data.val_files) key += "\nv:" + f;
    corpus = fmt::format("-{:08x}", static_cast<uint32_t>(data::fnv1a64(key.data(), key.size())));
  }
  return r.run.out_dir + "/_data/" + r.data.source + "-" + data::tokenizer_tag(tok) + corpus + "-s" +
         std::to_string(r.run.seed) + "-v" + fmt::format("{:g}", r.data.val_fraction);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Recipe& r, nn::Transformer& m, double adam_lr) {
  auto named = m.named_parameters();
  std::vector<std::pair<std::string, ag::Variable*>> decay, no_decay;
  auto split_decay = [&](const std::vector<std::pair<std::string, ag::Variable*>>& ps) {
    for (const auto& p : ps) (p.second->dim() >= 2 ? decay : no_decay).push_back(p);
  };
  optim::AdamWOptions ao;
  ao.beta1 = r.optim.beta1;
  ao.beta2 = r.optim.beta2;
  ao.eps = r.optim.eps;
  if (r.optim.name == "adamw") {
    split_decay(named);
    std::vector<optim::ParamGroup> g{{"decay", decay, adam_lr, r.optim.weight_decay}, {"no_decay", no_decay, adam_lr, 0.0}};
    return std::make_unique<optim::AdamW>(g, ao);
  }
  const optim::Partition part = optim::partition_for_muon(named);
  split_decay(part.rest);
  optim::MuonOptions mo;
  mo.momentum = r.optim.muon_momentum;
  if (r.run.precision == "bf16") mo.ns_dtype = DType::BF16;  // Newton-Schulz GEMMs in bf16, as the reference
  std::vector<std::unique_ptr<optim::Optimizer>> parts;
  parts.push_back(std::make_unique<optim::Muon>(
      std::vector<optim::ParamGroup>{{"hidden", part.hidden_matrices, r.optim.muon_lr, r.optim.weight_decay}}, mo));
  parts.push_back(std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{{"decay", decay, adam_lr, r.optim.weight_decay}, {"no_decay", no_decay, adam_lr, 0.0}}, ao));
  return std::make_unique<optim::CompositeOptimizer>(std::move(parts));
}

optim::ScheduleConfig schedule_of(const Recipe& r, int64_t warmup, int64_t total) {
  optim::ScheduleConfig s;
  s.kind = optim::parse_schedule(r.schedule.kind);
  s.warmup_steps = warmup;
  s.total_steps = std::max<int64_t>(1, total);
  s.min_ratio = r.schedule.min_ratio;
  s.decay_fraction = r.schedule.decay_fraction;
  return s;
}

// checkpoint.init_from: a Horizon run directory or step_<N>.h5 (weights by name), or a Hugging Face
// directory (weights mapped by train/hf.h onto the model `c` describes).
// A recipe may override fields of a Hugging Face config.json: say which, so a changed model is never
// silent (the recipe's model section, before SWAN / DroPE surgery).
void log_model_overrides(const std::string& from, const nn::ModelConfig& theirs, const nn::ModelConfig& ours, Log& log) {
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
    if (mine != cfg) log("  model.{} = {} (the recipe) differs from {}/config.json: {}", key, mine, from, cfg);
  }
}

std::map<std::string, Tensor> load_init_weights(const std::string& from, const nn::ModelConfig& c,
                                                const nn::ModelConfig& recipe_model, Log& log) {
  HZ_CHECK(fs::exists(from), ValueError, "checkpoint.init_from '", from, "' does not exist; give a Horizon run directory, a ",
           "step_<N>.h5 checkpoint, or a Hugging Face model directory (config.json + *.safetensors)");
  if (hf::is_hf_dir(from)) {
    hf::ImportReport rep;
    const nn::ModelConfig theirs = hf::import_config_dir(from, &rep);
    auto sd = hf::import_weights(from, c, DType::F32, &rep);
    log("init_from {}: Hugging Face {}, {} tensors{}", from, rep.architecture, rep.tensors.size(),
        rep.skipped.empty() ? std::string() : fmt::format(" ({} skipped)", rep.skipped.size()));
    log_model_overrides(from, theirs, recipe_model, log);
    return sd;
  }
  std::string path = from;
  if (fs::is_directory(from)) {
    path = find_latest_checkpoint(fs::exists(from + "/checkpoints") ? from + "/checkpoints" : from);
    HZ_CHECK(!path.empty(), ValueError, "init_from: no checkpoint found in '", from, "'");
  }
  return load_checkpoint(path).model;
}

}  // namespace

namespace {
std::unique_ptr<data::Tokenizer> recipe_tokenizer(const Recipe& r) {
  HZ_CHECK(!r.data.tokenizer.empty(), ValueError, "data.tokenizer is empty: the model came from a Hugging Face directory "
           "without tokenizer.json or tokenizer.model; set data.tokenizer to the tokenizer it was trained with");
  return data::make_tokenizer(r.data.tokenizer);
}
}  // namespace

// Model FLOPs of one token, forward + backward (3x forward; no recomputation counted): 6 per
// GEMM weight (the tied head counts the embedding once; an untied embedding is a gather) plus
// the attention score and value products over the exact visible pairs of each layer.
double flops_per_token(const nn::Transformer& m, int64_t T) {
  double n_mm = 0;
  for (const auto& [name, v] : m.named_parameters())
    if (v->dim() == 2) n_mm += static_cast<double>(v->numel());
  if (!m.cfg.tie_embeddings) n_mm -= static_cast<double>(m.cfg.vocab_size * m.cfg.d_model);
  double attn = 0;
  for (const auto& layer : m.layers) {
    const attn::AttnConfig cfg = layer->attn->kernel_config({T, T});
    attn += 3.0 * attn::attention_cost(cfg, m.cfg.n_heads, T, T, m.cfg.hdim()).flops_fwd / static_cast<double>(T);
  }
  return 6.0 * n_mm + attn;
}

// Dense peak of the device for the run's precision (TFLOP/s), 0 when unknown.
double peak_tflops(const Recipe& r, Device dev) {
  if (r.run.peak_tflops > 0) return r.run.peak_tflops;
  if (!dev.is_cuda()) return 0;
  const std::string name = cuda::device_name(dev.index);
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return r.run.precision == "bf16" ? 989.0 : r.run.tf32 ? 494.7 : 66.9;
  return 0;
}

Device train_device(const Recipe& r, const dist::Communicator& comm) {
  if (r.run.device == "cpu") return Device::cpu();
  HZ_CHECK(cuda::compiled(), DeviceError, "run.device=cuda, but this Horizon build has no CUDA support; rebuild "
           "with -DHZ_CUDA=ON on a machine with the CUDA toolkit, or set run.device=cpu");
  const int n = cuda::device_count();
  HZ_CHECK(n > 0, DeviceError, "run.device=cuda, but no CUDA device is visible (check nvidia-smi and "
           "CUDA_VISIBLE_DEVICES), or set run.device=cpu");
  return Device::cuda(comm.local_rank() % n);
}

std::pair<std::string, std::string> prepare_data(const Recipe& r, bool verbose) {
  const auto tok = recipe_tokenizer(r);
  const std::string dir = cache_dir(r, *tok);
  const std::string train_path = dir + "/train.shard", val_path = dir + "/val.shard";
  if (fs::exists(train_path) && fs::exists(val_path) && fs::exists(dir + "/meta.json")) return {train_path, val_path};
  if (r.data.source == "passkey" || r.data.source == "kv")
    throw ValueError("prepare_data: source '" + r.data.source + "' is synthetic and needs no shards");
  data::CorpusSpec spec;
  spec.source = r.data.source;
  spec.files = r.data.files;
  spec.val_files = r.data.val_files;
  spec.text_field = r.data.text_field;
  spec.token_format = r.data.token_format;
  spec.val_fraction = r.data.val_fraction;
  spec.seed = static_cast<uint64_t>(r.run.seed);
  data::ProgressFn progress;
  if (verbose)
    progress = [](const data::PrepareProgress& p) {  // large inputs only: the first report comes after a second
      if (p.seconds < 1.0) return;
      if (p.stage == "tokenizing")
        fmt::print(stderr, "  tokenizing: {}/{} documents, {:.1f}/{:.1f} MB, {:.1f} MB/s, {:.0f} s\n", p.docs_done,
                   p.docs_total, p.bytes_done / 1e6, p.bytes_total / 1e6, p.bytes_done / 1e6 / p.seconds, p.seconds);
      else
        fmt::print(stderr, "  {} ({:.0f} s)\n", p.stage, p.seconds);
    };
  const data::PrepareResult p = data::prepare_source(spec, *tok, dir, progress);
  if (verbose) {
    const std::string bpt = p.bytes_per_token() > 0 ? fmt::format("{:.3f} bytes/token", p.bytes_per_token())
                                                     : std::string("pre-tokenized");
    fmt::print("prepared {} with tokenizer {}: {} train docs / {} tokens, {} val docs / {} tokens, {}, {:.1f} s -> {}\n",
               r.data.source, tok->name(), p.train_docs, p.train_tokens, p.val_docs, p.val_tokens, bpt, p.seconds, dir);
  }
  return {p.train_path, p.val_path};
}

TrainResult train(const Recipe& r, const TrainOptions& opt) {
#ifdef _OPENMP
  if (r.run.threads > 0) omp_set_num_threads(static_cast<int>(r.run.threads));
#endif
  auto local = dist::make_local();
  dist::Communicator& comm = opt.comm ? *opt.comm : *local;
  const int rank = comm.rank(), world = comm.size();
  const bool lead = rank == 0;
  const char* fault_rank = std::getenv("HZ_FAULT_RANK");
  const char* fault_step = std::getenv("HZ_FAULT_STEP");
  const Device dev = train_device(r, comm);  // refuse a missing GPU before anything else
  TrainResult res;
  res.run_dir = r.run.out_dir + "/" + r.run.name;
  const std::string ckpt_dir = res.run_dir + "/checkpoints";
  if (lead) fs::create_directories(ckpt_dir);
  comm.barrier();

  // ---- resume point ------------------------------------------------------------------------
  std::string resume_path;
  if (r.checkpoint.resume == "latest") resume_path = find_latest_checkpoint(ckpt_dir);
  else if (!r.checkpoint.resume.empty()) resume_path = r.checkpoint.resume;
  CheckpointData ck;
  if (!resume_path.empty()) ck = load_checkpoint(resume_path);
  const int64_t start = resume_path.empty() ? 0 : ck.step;
  res.start_step = start;

  if (!resume_path.empty()) {
    const int64_t saved_world = ck.counters.count("world_size") ? ck.counters.at("world_size") : 1;
    HZ_CHECK(saved_world == world, ValueError, resume_path, " was written by a run with ", saved_world,
             " rank(s); resume it with the same world size (mpirun -np ", saved_world, "): each rank's loader cursor "
             "covers its own shard of the data, so a different world size would not continue the same trajectory");
  }
  Log log(res.run_dir + "/train.log", opt.quiet, start > 0, lead);
  std::ofstream metrics;
  if (lead) {
    std::ofstream cfg(res.run_dir + "/config.yaml");
    cfg << to_yaml(r);
    metrics.open(res.run_dir + "/metrics.jsonl", start > 0 ? std::ios::app : std::ios::trunc);
  }

  // ---- data ----------------------------------------------------------------------------------
  TrainData data;
  const auto tok = std::shared_ptr<const data::Tokenizer>(recipe_tokenizer(r));
  HZ_CHECK(tok->vocab_size() <= r.model.cfg.vocab_size, ValueError, "model.vocab_size (", r.model.cfg.vocab_size,
           ") is smaller than the vocabulary of tokenizer ", tok->name(), " (", tok->vocab_size(),
           " ids): set model.vocab_size to at least ", tok->vocab_size());
  if (r.data.source == "passkey" || r.data.source == "kv") {
    data.synth = std::make_unique<data::SyntheticLoader>(r.data.source, tok, r.data.seq_len, r.data.batch_size, r.run.seed);
  } else {
    if (lead) prepare_data(r, !opt.quiet);  // one rank tokenizes; the others wait, then read the shards
    comm.barrier();
    const auto [tp, vp] = prepare_data(r, false);
    data.shard_loader = std::make_unique<data::Loader>(data::Shard::open(tp), r.data.seq_len, r.data.batch_size,
                                                       r.run.seed, rank, world, tok->eos(), true);
    data.val = data::Shard::open(vp);
  }

  // ---- model ---------------------------------------------------------------------------------
  const DType compute = r.run.precision == "bf16" ? DType::BF16 : DType::F32;
  if (dev.is_cuda()) cuda::set_allow_tf32(r.run.tf32);
  auto place = [&](nn::Transformer& m) {  // parameters on the run's device, forward at its precision
    m.to(dev);
    m.compute_dtype = compute;
  };
  auto model = std::make_unique<nn::Transformer>(model_config_at(r, start), static_cast<uint64_t>(r.run.seed));
  if (!resume_path.empty()) {
    model->load_state_dict(ck.model, /*strict=*/true);
    const std::string key = "loader/rank" + std::to_string(rank);
    data.restore({ck.counters.at(key + "/epoch"), ck.counters.at(key + "/index")});
    res.tokens_seen = ck.tokens_seen;
    log("resumed from {} at step {}", resume_path, start);
  } else if (!r.checkpoint.init_from.empty()) {
    const SurgeryReport rep = load_weights(*model, load_init_weights(r.checkpoint.init_from, model->cfg, r.model.cfg, log));
    log("init_from {}: {} parameters loaded, {} new (kept their initialisation), {} dropped", r.checkpoint.init_from,
        rep.loaded.size(), rep.added.size(), rep.dropped.size());
    for (const auto& n : rep.added) log("  new:     {}", n);
    for (const auto& n : rep.dropped) log("  dropped: {}", n);
  }

  place(*model);
  if (dev.is_cuda()) log("device {}: {}, precision {}{}", dev.str(), cuda::device_name(dev.index), r.run.precision,
                         r.run.tf32 ? " (TF32 GEMMs)" : "");
  else if (r.run.precision == "bf16") log("device cpu, precision bf16");

  // ---- optimizer & schedule ------------------------------------------------------------------
  const bool after_reset = r.drope.at_step >= 0 && r.drope.reset_optimizer && start > r.drope.at_step;
  double adam_lr = after_reset ? r.drope.lr : r.optim.lr;
  int64_t sched_origin = after_reset ? r.drope.at_step : 0;
  optim::ScheduleConfig sched = after_reset ? schedule_of(r, r.drope.warmup_steps, r.train.steps - r.drope.at_step)
                                            : schedule_of(r, r.schedule.warmup_steps, r.train.steps);
  auto optimizer = make_optimizer(r, *model, adam_lr);
  if (!resume_path.empty()) optimizer->load_state_dict(ck.optimizer);
  sync_parameters(comm, *model);
  const int64_t bucket_bytes = opt.bucket_bytes > 0 ? opt.bucket_bytes : r.train.bucket_mb << 20;
  std::unique_ptr<dist::GradSync> gsync;
  auto make_sync = [&] {
    if (world > 1) gsync = std::make_unique<dist::GradSync>(comm, model->named_parameters(), bucket_bytes, r.train.overlap_comm);
  };
  make_sync();
  double comm_before = 0;  // of GradSyncs replaced by surgery

  const int64_t tokens_per_step = r.data.batch_size * r.data.seq_len * r.train.grad_accum * world;
  const double peak = peak_tflops(r, dev);
  const double model_flops = flops_per_token(*model, r.data.seq_len);
  if (dev.is_cuda()) reset_peak_memory(dev);
  log("run {}: {} parameters, {} layers [{}], {} steps", r.run.name, model->num_parameters(), r.model.cfg.n_layers,
      fmt::format("{}", fmt::join(model->cfg.layer_kind_names(), ", ")), r.train.steps);
  log("global batch = {} sequences/rank x {} accumulation x {} rank(s) = {} sequences of {} tokens = {} tokens/step{}",
      r.data.batch_size, r.train.grad_accum, world, r.data.batch_size * r.train.grad_accum * world, r.data.seq_len,
      tokens_per_step, world > 1 ? fmt::format(" ({} communicator, {} gradient buckets, overlap {})", comm.name(),
                                                gsync->num_buckets(), r.train.overlap_comm ? "on" : "off")
                                 : std::string());

  auto save = [&](int64_t step_done) {
    const data::LoaderCursor cur = data.cursor();
    const auto epochs = comm.all_gather(cur.epoch), indices = comm.all_gather(cur.index);  // every rank's cursor
    if (!lead) return;
    CheckpointData c;
    c.step = step_done;
    c.tokens_seen = res.tokens_seen;
    c.model = model->state_dict();
    optimizer->state_dict(c.optimizer);
    for (int q = 0; q < world; ++q) {
      c.counters["loader/rank" + std::to_string(q) + "/epoch"] = epochs[q];
      c.counters["loader/rank" + std::to_string(q) + "/index"] = indices[q];
    }
    c.counters["world_size"] = world;
    c.counters["rng/seed"] = r.run.seed;
    c.meta["recipe"] = to_yaml(r);
    c.meta["horizon_version"] = "0.1.0";
    save_checkpoint(checkpoint_path(ckpt_dir, step_done), c);
    prune_checkpoints(ckpt_dir, static_cast<int>(r.checkpoint.keep_last));
  };
  auto evaluate_now = [&](int64_t step_done) {
    if (!data.val || !lead) return std::nan("");
    const int64_t eb = r.eval.batch_size > 0 ? r.eval.batch_size : r.data.batch_size;
    std::string line = fmt::format("{{\"step\": {}, \"eval\": {{", step_done);
    double at_train = std::nan("");
    bool first = true;
    for (int64_t L : r.eval_lengths()) {
      const double l = eval::mean_loss(*model, *data.val, L, eb, r.eval.batches, r.data.seq_len);
      if (std::isnan(l)) {
        log("  eval step {:>6}  length {:>6}  skipped: the validation split holds no batch of {} x {}", step_done, L, eb, L);
        continue;
      }
      if (L == r.data.seq_len) at_train = l;
      line += fmt::format("{}\"{}\": {{\"loss\": {:.6f}, \"ppl\": {:.4f}}}", first ? "" : ", ", L, l, std::exp(l));
      log("  eval step {:>6}  length {:>6}  loss {:.4f}  ppl {:.3f}", step_done, L, l, std::exp(l));
      first = false;
    }
    metrics << line << "}}\n";
    metrics.flush();
    return at_train;
  };

  // ---- loop -----------------------------------------------------------------------------------
  const auto t0 = std::chrono::steady_clock::now();
  auto t_log = t0;
  int64_t tokens_since_log = 0;
  int64_t step = start;
  for (; step < r.train.steps; ++step) {
    if (opt.stop_after >= 0 && step - start >= opt.stop_after) break;
    if (r.drope.at_step == step) {
      // DroPE: drop every position encoding now (weights untouched)
      if (r.drope.qk_norm) {
        SurgeryReport rep;
        std::map<std::string, Tensor> old_state;
        if (!r.drope.reset_optimizer) optimizer->state_dict(old_state);
        model = rebuild_model(*model, drope_config(model->cfg, true), static_cast<uint64_t>(r.run.seed), &rep);
        place(*model);
        auto fresh = make_optimizer(r, *model, r.drope.reset_optimizer ? r.drope.lr : adam_lr);
        if (!r.drope.reset_optimizer) {  // carry the state of every surviving parameter
          std::map<std::string, Tensor> merged;
          fresh->state_dict(merged);
          for (auto& [k, v] : old_state)
            if (merged.count(k)) merged[k] = v;
          fresh->load_state_dict(merged);
        }
        optimizer = std::move(fresh);
        if (gsync) comm_before += gsync->comm_seconds();
        make_sync();
        log("DroPE at step {}: position encodings dropped, QK-norm added ({} new parameters)", step, rep.added.size());
      } else {
        drop_positions(*model);
        if (r.drope.reset_optimizer) optimizer = make_optimizer(r, *model, r.drope.lr);
        log("DroPE at step {}: position encodings dropped", step);
      }
      if (r.drope.reset_optimizer) {
        adam_lr = r.drope.lr;
        sched_origin = step;
        sched = schedule_of(r, r.drope.warmup_steps, r.train.steps - step);
      }
    }
    // Fault injection for the failure tests: HZ_FAULT_RANK / HZ_FAULT_STEP make that rank throw at
    // that step, or die from SIGKILL when HZ_FAULT_SIGNAL=1.
    if (fault_rank && fault_step && std::atoi(fault_rank) == rank && std::atoll(fault_step) == step) {
      if (const char* sig = std::getenv("HZ_FAULT_SIGNAL"); sig && std::string(sig) == "1") std::raise(SIGKILL);
      throw Error(fmt::format("injected fault at step {} (HZ_FAULT_RANK={}, HZ_FAULT_STEP={})", step, rank, step));
    }
    double loss_sum = 0;
    for (int64_t micro = 0; micro < r.train.grad_accum; ++micro) {
      const data::Batch b = data.next();
      ag::Variable loss = model->loss(b.tokens, b.targets, b.weights);
      loss_sum += loss.item();
      if (r.train.grad_accum > 1) loss = ag::mul_scalar(loss, 1.0 / r.train.grad_accum);
      if (gsync && micro == r.train.grad_accum - 1) gsync->begin();  // sync on the last micro-batch only
      loss.backward();
    }
    if (gsync) gsync->finish();  // gradients are now the average over ranks
    const double loss = comm.all_reduce_scalar(loss_sum / r.train.grad_accum, dist::ReduceOp::Average);
    HZ_CHECK(std::isfinite(loss), ValueError, "loss became ", loss, " at step ", step,
             "; lower optim.lr or enable optim.grad_clip");
    auto params = model->named_parameters();
    const double gnorm = optim::clip_grad_norm(params, r.optim.grad_clip);
    HZ_CHECK(std::isfinite(gnorm), ValueError, "gradient norm became ", gnorm, " at step ", step,
             "; lower optim.lr or enable optim.grad_clip");
    const double mult = optim::lr_multiplier(sched, step - sched_origin);
    optimizer->step(mult);
    model->zero_grad();
    if (opt.on_step) opt.on_step(step + 1, *model);
    res.losses.push_back(loss);
    res.tokens_seen += tokens_per_step;
    tokens_since_log += tokens_per_step;
    const int64_t done = step + 1;
    if (done % r.train.log_every == 0 || done == r.train.steps) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - t_log).count();
      const double tps = tokens_since_log / std::max(dt, 1e-9);
      const double eta = (r.train.steps - done) * tokens_per_step / std::max(tps, 1e-9);
      // model FLOPs per device: every rank computes its share of the tokens
      const double mfu = peak > 0 ? tps / world * model_flops / (peak * 1e12) : 0.0;
      std::string extra, jextra;
      if (dev.is_cuda()) {
        const DeviceMemoryStats ms = memory_stats(dev);
        extra = fmt::format("  mem {:.2f}/{:.2f} GiB", ms.peak / 1073741824.0, ms.reserved / 1073741824.0);
        jextra = fmt::format(", \"gpu_mem_peak\": {}, \"gpu_mem_reserved\": {}", ms.peak, ms.reserved);
      }
      if (peak > 0) {
        extra += fmt::format("  MFU {:.1f}%", 100 * mfu);
        jextra += fmt::format(", \"mfu\": {:.4f}", mfu);
      }
      log("step {:>6}/{}  loss {:.4f}  lr {:.3e}  grad_norm {:.3f}  {:.0f} tok/s{}  ETA {:.0f}s", done, r.train.steps, loss,
          adam_lr * mult, gnorm, tps, extra, eta);
      metrics << fmt::format("{{\"step\": {}, \"loss\": {:.6f}, \"lr\": {:.6e}, \"grad_norm\": {:.6f}, \"tokens\": {}, \"tok_per_s\": {:.1f}{}}}\n",
                             done, loss, adam_lr * mult, gnorm, res.tokens_seen, tps, jextra);
      metrics.flush();
      t_log = now;
      tokens_since_log = 0;
    }
    if (r.eval.every > 0 && done % r.eval.every == 0 && done != r.train.steps) evaluate_now(done);
    if (r.checkpoint.every > 0 && done % r.checkpoint.every == 0 && done != r.train.steps) save(done);
  }
  res.end_step = step;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.tokens_per_second = (step - start) * tokens_per_step / std::max(secs, 1e-9);
  res.seconds = secs;
  res.comm_seconds = comm_before + (gsync ? gsync->comm_seconds() : 0.0);
  if (world > 1)
    log("communication: {:.2f} s of {:.2f} s ({:.1f}%) in gradient all-reduces", res.comm_seconds, secs,
        100 * res.comm_seconds / std::max(secs, 1e-9));
  if (step == r.train.steps) {
    res.final_val_loss = evaluate_now(step);
    save(step);
    log("done: {} steps, {:.0f} tok/s, final val loss {}", step - start, res.tokens_per_second,
        std::isnan(res.final_val_loss) ? std::string("n/a (no validation split)") : fmt::format("{:.4f}", res.final_val_loss));
  }
  return res;
}

Recipe hf_recipe(const std::string& dir, const std::vector<std::string>& overrides) {
  hf::ImportReport rep;
  hf::import_config_dir(dir, &rep);
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  YAML::Node doc;
  doc["run"]["name"] = p.filename().string();
  doc["checkpoint"]["init_from"] = dir;
  doc["data"]["seq_len"] = rep.max_position_embeddings;
  YAML::Emitter e;
  e << doc;
  return parse_recipe(e.c_str(), dir + "/config.json", overrides);
}

namespace {
// A Horizon run directory or checkpoint: its recipe (plus overrides) and weights.
void load_horizon_run(const std::string& target, const std::vector<std::string>& overrides, LoadedRun& lr) {
  if (fs::is_directory(target)) {
    lr.run_dir = target;
    lr.checkpoint = find_latest_checkpoint(target + "/checkpoints");
    HZ_CHECK(!lr.checkpoint.empty(), ValueError, "no checkpoint in '", target, "/checkpoints'; train first");
  } else {
    lr.checkpoint = target;
    // <run>/checkpoints/step_<N>.h5 belongs to <run>; any other checkpoint to its own directory
    const fs::path parent = fs::path(target).parent_path();
    lr.run_dir = (parent.filename() == "checkpoints" ? parent.parent_path() : parent).string();
    if (lr.run_dir.empty()) lr.run_dir = ".";
  }
  const CheckpointData ck = load_checkpoint(lr.checkpoint);
  HZ_CHECK(ck.meta.count("recipe"), ValueError, lr.checkpoint, ": checkpoint carries no recipe");
  lr.recipe = parse_recipe(ck.meta.at("recipe"), lr.checkpoint + ":recipe", overrides);
  lr.step = ck.step;
  lr.model = std::make_unique<nn::Transformer>(model_config_at(lr.recipe, ck.step), static_cast<uint64_t>(lr.recipe.run.seed));
  lr.model->load_state_dict(ck.model, /*strict=*/true);
}
}  // namespace

LoadedRun load_run(const std::string& target, const std::vector<std::string>& overrides) {
  LoadedRun lr;
  if (hf::is_hf_dir(target)) {
    lr.recipe = hf_recipe(target, overrides);
    lr.checkpoint = target;
    lr.run_dir = lr.recipe.run.out_dir + "/" + lr.recipe.run.name;
    lr.model = std::make_unique<nn::Transformer>(model_config_at(lr.recipe, 0), static_cast<uint64_t>(lr.recipe.run.seed));
    lr.model->load_state_dict(hf::import_weights(target, lr.model->cfg), /*strict=*/true);
  } else {
    load_horizon_run(target, overrides, lr);
  }
  // evaluate where and how the run trained (override run.device / run.precision to change it)
  auto local = dist::make_local();
  lr.model->to(train_device(lr.recipe, *local));
  lr.model->compute_dtype = lr.recipe.run.precision == "bf16" ? DType::BF16 : DType::F32;
  return lr;
}


}  // namespace hz::train
