#include "train/recipe.h"

#include <yaml-cpp/yaml.h>

#include "core/names.h"
#include "train/model_source.h"
#include "train/surgery.h"

#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

namespace hz::train {

namespace {
const char* const kSources[] = {"bible", "files", "jsonl", "tokens", "passkey", "kv", "niah", "niah_short"};
const char* const kOptimizers[] = {"adamw", "muon"};
static_assert(sizeof(kSources) / sizeof(*kSources) == static_cast<size_t>(DataSource::Count));
static_assert(sizeof(kOptimizers) / sizeof(*kOptimizers) == static_cast<size_t>(OptimizerKind::Count));

}  // namespace

const char* name(DataSource s) { return kSources[static_cast<int>(s)]; }
const char* name(OptimizerKind k) { return kOptimizers[static_cast<int>(k)]; }
DataSource parse_data_source(const std::string& s) { return parse_name<DataSource>(s, kSources, "data.source"); }
OptimizerKind parse_optimizer(const std::string& s) { return parse_name<OptimizerKind>(s, kOptimizers, "optim.name"); }
bool is_file_source(DataSource s) { return s == DataSource::Files || s == DataSource::Jsonl || s == DataSource::Tokens; }
bool is_synthetic(DataSource s) { return s != DataSource::Bible && !is_file_source(s); }
bool is_synthetic_source(const std::string& s) { return is_synthetic(parse_data_source(s)); }

namespace {

// ---- the one list of fields ---------------------------------------------------------------
// V provides: operator()(path, T& value, doc) for int64_t, double, bool, std::string and vectors
// of int64_t/double/std::string, a map<int64_t, std::string>, and
// enumeration(path, E& value, doc, parse, name) for enums, and kinds(path, kinds, doc).

template <class V>
void visit_kind(const std::string& p, attn::AttentionSpec& s, V& v) {
  v.enumeration(p + ".pos", s.pos.kind, "position encoding: none | rope | prope | alibi", attn::parse_pos,
                static_cast<const char* (*)(attn::PosKind)>(attn::name));
  v(p + ".rope_base", s.pos.rope_base, "RoPE base (w_m = base^(-2m/d))");
  v.enumeration(p + ".rope_scaling", s.pos.scaling, "RoPE scaling: none | pi | ntk | dynamic_ntk | yarn | llama3",
                attn::parse_scaling, static_cast<const char* (*)(attn::RopeScaling)>(attn::name));
  v(p + ".rope_factor", s.pos.factor, "extension factor s for pi / ntk / yarn / llama3; dynamic_ntk: s = factor T/C - (factor - 1)");
  v(p + ".rope_original_context", s.pos.original_context, "C_train for yarn / llama3 / dynamic_ntk (0 = data.seq_len)");
  v(p + ".yarn_alpha", s.pos.yarn_alpha, "YaRN: pairs under alpha rotations over C_train are interpolated (beta_slow)");
  v(p + ".yarn_beta", s.pos.yarn_beta, "YaRN: pairs over beta rotations keep their frequency (beta_fast)");
  v.enumeration(p + ".yarn_ramp", s.pos.yarn_ramp, "YaRN ramp: rotations (docs/methods.md) | index (transformers)",
                attn::parse_yarn_ramp, static_cast<const char* (*)(attn::YarnRamp)>(attn::name));
  v(p + ".yarn_truncate", s.pos.yarn_truncate, "YaRN index ramp: round its ends outward (transformers' truncate)");
  v(p + ".yarn_mscale", s.pos.yarn_mscale, "YaRN cos/sin multiplier (0 = 0.1 ln s + 1)");
  v(p + ".llama3_low_freq_factor", s.pos.llama3_low_freq_factor, "llama3: pairs under this many rotations over C_train are divided by s");
  v(p + ".llama3_high_freq_factor", s.pos.llama3_high_freq_factor, "llama3: pairs over this many rotations keep their frequency");
  v(p + ".prope_fraction", s.pos.prope_fraction, "p-RoPE: fraction of pairs that rotate");
  v(p + ".prope_base_eff", s.pos.prope_base_eff, "p-RoPE: frequencies log-spaced in [1/base_eff, 1]");
  v.enumeration(p + ".mask", s.mask.kind, "mask: causal | window | scope", attn::parse_mask,
                static_cast<const char* (*)(attn::MaskKind)>(attn::name));
  v(p + ".window", s.mask.window, "sliding window W (mask: window)");
  v(p + ".scope_gamma", s.mask.scope_gamma, "SCOPE gamma (0 = auto, T^(1/H))");
  v(p + ".scope_min", s.mask.scope_min, "SCOPE minimum scope");
  v(p + ".scope_max", s.mask.scope_max, "SCOPE maximum scope (0 = T)");
  v(p + ".scopes", s.mask.scopes, "SCOPE explicit scopes, one per query head (overrides gamma)");
  v(p + ".freeze_scopes", s.mask.freeze_scopes, "SCOPE: keep the training scopes at longer T");
  v.enumeration(p + ".logit", s.logit.kind, "logit transform: identity | scale_invariant | logn | swan_row | temperature",
                attn::parse_logit, static_cast<const char* (*)(attn::LogitKind)>(attn::name));
  v(p + ".tau", s.logit.tau, "scale_invariant tau");
  v(p + ".logn_c", s.logit.logn_c, "logn: initial (or fixed) c");
  v(p + ".logn_learnable", s.logit.logn_learnable, "logn: c is a learned scalar per head");
  v(p + ".swan_a", s.logit.swan_a, "swan_row: g(n) = ln(a + n) / ln(a)");
  v(p + ".beta", s.logit.beta, "temperature: beta");
  v(p + ".temp_c", s.logit.temp_c, "temperature: beta = 1 + c ln s when != 0");
  v.enumeration(p + ".qk_norm", s.qk_norm, "QK-norm: none | full | per_head", attn::parse_qknorm,
                static_cast<const char* (*)(attn::QKNorm)>(attn::name));
}

template <class V>
void visit_fields(Recipe& r, V& v) {
  v("run.name", r.run.name, "run name: outputs go to <out_dir>/<name>/");
  v("run.out_dir", r.run.out_dir, "directory holding run directories");
  v("run.seed", r.run.seed, "seed of initialisation, data split and shuffling");
  v("run.threads", r.run.threads, "OpenMP threads (0 = OMP_NUM_THREADS or all cores)");
  v.enumeration("run.device", r.run.device, "cpu | cuda (several ranks: each uses the GPU of its local rank; NCCL all-reduces)",
                parse_device_type, static_cast<const char* (*)(DeviceType)>(hz::name));
  v.enumeration("run.precision", r.run.precision,
    "fp32 | bf16: bf16 keeps f32 master weights and optimizer state, computes activations and GEMMs in bf16 "
    "(f32 accumulation), norms/softmax/loss/gradients in f32",
    nn::parse_precision, static_cast<const char* (*)(nn::Precision)>(nn::name));
  v("run.tf32", r.run.tf32, "CUDA only: f32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative)");
  v("run.peak_tflops", r.run.peak_tflops,
    "peak TFLOP/s for the logged MFU (0 = the GPU's known dense peak for the precision; no MFU on CPU)");
  nn::ModelConfig& m = r.model.cfg;
  v("model.vocab_size", m.vocab_size, "vocabulary size: at least the tokenizer's (byte: 259; horizon tokenize --info TOKENIZER)");
  v("model.d_model", m.d_model, "residual width C");
  v("model.n_layers", m.n_layers, "number of blocks");
  v("model.n_heads", m.n_heads, "query heads H");
  v("model.n_kv_heads", m.n_kv_heads, "key/value heads (0 = n_heads; must divide n_heads)");
  v("model.head_dim", m.head_dim, "head dim D (0 = d_model / n_heads)");
  v("model.mlp_hidden", m.mlp_hidden, "MLP hidden width (0 = 4C, or 8C/3 rounded to 8 for swiglu)");
  v.enumeration("model.mlp", m.mlp, "MLP: swiglu | relu2 | gelu", nn::parse_mlp, nn::mlp_name);
  v("model.tie_embeddings", m.tie_embeddings, "output head shares the embedding matrix");
  v("model.qkv_bias", m.qkv_bias, "additive biases on the q, k and v projections (Qwen2)");
  v("model.norm_eps", m.norm_eps, "RMSNorm epsilon");
  v("model.init_std", m.init_std, "init std (residual projections get std / sqrt(2 n_layers))");
  v.kinds("model.layer_kinds", m.kinds, "named layer kinds: name -> attention fields (below)");
  v("model.pattern", m.pattern, "layer kinds repeated over the layers, e.g. [global_nope, swa_rope, swa_rope, swa_rope]");
  v("model.overrides", m.overrides, "explicit per-layer kinds: {layer index: kind name}");
  v.enumeration("data.source", r.data.source,
                "corpus: bible (King James Bible, embedded in the binary) | files (text) | jsonl | tokens (llm.c / nanoGPT .bin) | "
                "passkey | kv | niah | niah_short (RULER needles on the Bible, data/needles.h)",
                parse_data_source, static_cast<const char* (*)(DataSource)>(name));
  v("data.files", r.data.files, "globs of the corpus files for source=files / jsonl / tokens");
  v("data.val_files", r.data.val_files, "globs of validation files of the same kind ([] = hold out data.val_fraction of the documents)");
  v("data.text_field", r.data.text_field, "jsonl: the string field of each line's object holding the document");
  v("data.token_format", r.data.token_format, "tokens: auto | llmc (256-int32 header) | nanogpt (raw uint16); documents cut at EOS/BOS");
  v("data.tokenizer", r.data.tokenizer, "tokenizer: byte | PATH/tokenizer.json (Hugging Face BPE) | PATH.model (SentencePiece)");
  v("data.val_fraction", r.data.val_fraction, "share of documents held out for validation");
  v("data.seq_len", r.data.seq_len, "training context length T");
  v("data.batch_size", r.data.batch_size, "sequences per step per rank (before accumulation)");
  v("data.cache_dir", r.data.cache_dir, "prepared shards ('' = <out_dir>/_data/<source>-<tokenizer tag>[-<corpus hash>]-s<seed>-v<val_fraction>)");
  v.enumeration("optim.name", r.optim.name, "adamw | muon (Muon on hidden matrices, AdamW on the rest)", parse_optimizer,
                static_cast<const char* (*)(OptimizerKind)>(name));
  v("optim.lr", r.optim.lr, "AdamW learning rate");
  v("optim.weight_decay", r.optim.weight_decay, "decoupled weight decay on 2-D weights");
  v("optim.beta1", r.optim.beta1, "AdamW beta1");
  v("optim.beta2", r.optim.beta2, "AdamW beta2");
  v("optim.eps", r.optim.eps, "AdamW epsilon");
  v("optim.muon_lr", r.optim.muon_lr, "Muon learning rate");
  v("optim.muon_momentum", r.optim.muon_momentum, "Muon momentum mu");
  v("optim.grad_clip", r.optim.grad_clip, "global gradient-norm clip (0 = off)");
  v.enumeration("schedule.kind", r.schedule.kind, "constant | cosine | wsd", optim::parse_schedule,
                static_cast<const char* (*)(optim::ScheduleKind)>(optim::name));
  v("schedule.warmup_steps", r.schedule.warmup_steps, "linear warmup steps");
  v("schedule.min_ratio", r.schedule.min_ratio, "final lr / peak lr");
  v("schedule.decay_fraction", r.schedule.decay_fraction, "wsd: share of steps in the linear cooldown");
  v("train.steps", r.train.steps, "optimizer steps");
  v("train.grad_accum", r.train.grad_accum, "micro-batches per step");
  v("train.log_every", r.train.log_every, "console / metrics.jsonl interval");
  v("train.bucket_mb", r.train.bucket_mb, "data parallel: gradient all-reduce bucket size in MiB");
  v("train.overlap_comm", r.train.overlap_comm, "data parallel: all-reduce buckets during backward (false: after it)");
  v("checkpoint.every", r.checkpoint.every, "checkpoint interval in steps (0 = only at the end)");
  v("checkpoint.keep_last", r.checkpoint.keep_last, "checkpoints kept");
  v("checkpoint.resume", r.checkpoint.resume, "'' | latest | path: continue a run exactly");
  v("checkpoint.init_from", r.checkpoint.init_from, "start from another run's weights (checkpoint or run dir)");
  v("eval.every", r.eval.every, "validation interval in steps (0 = only at the end)");
  v("eval.batches", r.eval.opts.batches, "validation batches per length");
  v("eval.batch_size", r.eval.opts.batch_size, "validation batch size (0 = data.batch_size)");
  v("eval.lengths", r.eval.opts.lengths, "evaluation lengths ([] = 1x 2x 4x 8x data.seq_len)");
  v.enumeration("eval.rope_scaling", r.eval.opts.inference.rope_scaling,
                "inference RoPE scaling: '' (as trained) | none | pi | ntk | dynamic_ntk | yarn | llama3", attn::parse_scaling,
                static_cast<const char* (*)(attn::RopeScaling)>(attn::name));
  v("eval.swan_a", r.eval.opts.inference.swan_a, "SWAN row scaling a on global NoPE layers (0 = off)");
  v("eval.drope_c", r.eval.opts.inference.drope_c, "DroPE temperature c: beta = 1 + c ln s (0 = off)");
  v("eval.lampe", r.eval.opts.inference.lampe, "LaMPE on RoPE layers");
  v("eval.lampe_L", r.eval.opts.inference.lampe_L, "LaMPE mapping scale L (0 = 3/4 of seq_len)");
  v("eval.lampe_a", r.eval.opts.inference.lampe_a, "LaMPE sigmoid slope a");
  v("eval.lampe_b", r.eval.opts.inference.lampe_b, "LaMPE sigmoid offset b");
  v("eval.lampe_local", r.eval.opts.inference.lampe_local, "LaMPE local region");
  v("eval.lampe_sink", r.eval.opts.inference.lampe_sink, "LaMPE sink region");
  v("eval.fit_drope_c", r.eval.opts.fit_drope_c, "candidate DroPE c values; eval reports the best per length");
  v("eval.passkey_examples", r.eval.opts.passkey_examples, "passkey retrieval examples per (length, depth) (0 = off)");
  v("eval.passkey_depths", r.eval.opts.passkey_depths, "needle depths for the passkey grid (fractions of the filler)");
  v("eval.fit_swan_a", r.eval.opts.fit_swan_a, "candidate SWAN a values; eval reports the best per length and per 128-token window");
  v("eval.needle_tasks", r.eval.opts.needles.tasks, "RULER needle tasks answered by greedy decoding ([] = off): niah_single_number niah_single_word niah_multikey niah_multivalue niah_multiquery passkey");
  v("eval.needle_samples", r.eval.opts.needles.samples, "needle examples per (task, length, depth)");
  v("eval.needle_depths", r.eval.opts.needles.depths, "needle depths (fractions of the haystack)");
  v.enumeration("eval.needle_format", r.eval.opts.needles.format, "needle wording: ruler (RULER's templates) | short (fewer tokens)",
                data::parse_needle_format, static_cast<const char* (*)(data::NeedleFormat)>(data::name));
  v("eval.probe_sequences", r.eval.opts.probe_sequences, "linear position probe on this many validation sequences (0 = off)");
  v("drope.at_step", r.drope.at_step, "drop position encodings at this step (-1 = never)");
  v("drope.qk_norm", r.drope.qk_norm, "add full QK-norm at the drop (gains start at 1)");
  v("drope.reset_optimizer", r.drope.reset_optimizer, "fresh optimizer and schedule at the drop");
  v("drope.lr", r.drope.lr, "peak lr after a reset");
  v("drope.warmup_steps", r.drope.warmup_steps, "warmup after a reset");
  v("swan.enabled", r.swan.enabled, "build a SWAN stack (global NoPE + SWA-RoPE) instead of model.pattern");
  v("swan.pattern", r.swan.pattern, "SWAN layer pattern over global_nope / swa_rope");
  v("swan.window", r.swan.window, "SWA window of the swa_rope layers");
  v("swan.rope_base", r.swan.rope_base, "RoPE base of the swa_rope layers (0 = as layer kind 'rope' or 10000)");
}

std::vector<std::string> split_path(const std::string& path) {
  std::stringstream ss(path);
  std::string part;
  std::vector<std::string> parts;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

std::string fmt_line(const std::string& file, const YAML::Mark& m) {
  if (m.line < 0) return file + " (command-line override)";
  return file + ":" + std::to_string(m.line + 1);
}

// ---- reader ---------------------------------------------------------------------------------
struct Reader {
  YAML::Node root;
  std::string file;
  std::set<std::string> known;            // visited leaf paths
  std::set<std::string> dynamic_prefixes;  // subtrees owned by a map-typed field
  std::set<std::string> overridden;        // paths set on the command line

  YAML::Node find(const std::string& path) const {
    YAML::Node cur;
    cur.reset(root);
    for (const std::string& part : split_path(path)) {
      if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      YAML::Node next = cur[part];
      if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      cur.reset(next);
    }
    return cur;
  }
  bool from_command_line(const std::string& path) const {
    for (const auto& o : overridden)
      if (path == o || path.rfind(o + ".", 0) == 0 || path.rfind(o + "[", 0) == 0) return true;
    return false;
  }
  std::string where(const YAML::Node& n, const std::string& path) const {
    return from_command_line(path) ? file + " (command-line override " + path + ")" : fmt_line(file, n.Mark());
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& path, const std::string& what) const {
    throw RecipeError(where(n, path) + ": " + path + ": " + what);
  }
  template <class T>
  T convert(const YAML::Node& n, const std::string& path, const char* tname) const {
    if (!n.IsScalar()) fail(n, path, std::string("expected ") + tname + ", got a " + (n.IsMap() ? "map" : n.IsSequence() ? "list" : "null"));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, path, std::string("expected ") + tname + ", got '" + n.Scalar() + "'");
    }
  }
  void operator()(const std::string& path, int64_t& v, const char*) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = convert<int64_t>(n, path, "an integer");
  }
  void operator()(const std::string& path, double& v, const char*) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = convert<double>(n, path, "a number");
  }
  void operator()(const std::string& path, bool& v, const char*) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = convert<bool>(n, path, "true or false");
  }
  void operator()(const std::string& path, std::string& v, const char*) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = n.IsNull() ? std::string() : convert<std::string>(n, path, "a string");
  }
  template <class T>
  void list(const std::string& path, std::vector<T>& v, const char* tname) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsSequence()) fail(n, path, std::string("expected a list of ") + tname);
    v.clear();
    for (size_t i = 0; i < n.size(); ++i) v.push_back(convert<T>(n[i], path + "[" + std::to_string(i) + "]", tname));
  }
  void operator()(const std::string& path, std::vector<int64_t>& v, const char*) { list(path, v, "integers"); }
  void operator()(const std::string& path, std::vector<double>& v, const char*) { list(path, v, "numbers"); }
  void operator()(const std::string& path, std::vector<std::string>& v, const char*) { list(path, v, "strings"); }
  void operator()(const std::string& path, std::map<int64_t, std::string>& v, const char*) {
    known.insert(path);
    dynamic_prefixes.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap()) fail(n, path, "expected a map {layer index: kind name}");
    v.clear();
    for (auto it = n.begin(); it != n.end(); ++it)
      v[convert<int64_t>(it->first, path, "a layer index")] = convert<std::string>(it->second, path, "a kind name");
  }
  template <class E>
  void enumeration(const std::string& path, E& v, const char*, E (*parse)(const std::string&), const char* (*)(E)) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined()) return;
    const std::string s = convert<std::string>(n, path, "a name");
    try {
      v = parse(s);
    } catch (const ValueError& e) {
      fail(n, path, e.what());
    }
  }
  // an optional choice: '' (or null) leaves it unset
  template <class E>
  void enumeration(const std::string& path, std::optional<E>& v, const char*, E (*parse)(const std::string&),
                   const char* (*)(E)) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined()) return;
    const std::string s = n.IsNull() ? std::string() : convert<std::string>(n, path, "a name or ''");
    if (s.empty()) {
      v.reset();
      return;
    }
    try {
      v = parse(s);
    } catch (const ValueError& e) {
      fail(n, path, e.what());
    }
  }
  void kinds(const std::string& path, std::vector<nn::LayerKind>& kinds, const char*) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap()) fail(n, path, "expected a map {kind name: {pos: ..., mask: ..., ...}}");
    kinds.clear();
    for (auto it = n.begin(); it != n.end(); ++it) {
      nn::LayerKind k;
      k.name = convert<std::string>(it->first, path, "a kind name");
      if (!it->second.IsMap() && !it->second.IsNull()) fail(it->second, path + "." + k.name, "expected a map of attention fields");
      visit_kind(path + "." + k.name, k.attn, *this);
      kinds.push_back(k);
    }
  }
  // Every key in the document must be a known field.
  void check_unknown(const YAML::Node& n, const std::string& prefix) const {
    if (!n.IsMap()) return;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (known.count(path)) {
        if (!dynamic_prefixes.count(path)) check_unknown(it->second, path);
        continue;
      }
      bool is_prefix = false;
      for (const auto& k : known) is_prefix |= k.rfind(path + ".", 0) == 0;
      if (!is_prefix) {
        std::string hint;
        for (const auto& k : known)
          if (k.rfind(prefix.empty() ? "" : prefix + ".", 0) == 0 && k.find('.', prefix.size() + 1) == std::string::npos)
            hint += (hint.empty() ? "" : ", ") + k.substr(prefix.empty() ? 0 : prefix.size() + 1);
        throw RecipeError(where(it->first, path) + ": unknown key '" + path + "'" +
                          (hint.empty() ? "" : "; known keys here: " + hint));
      }
      check_unknown(it->second, path);
    }
  }
};

// ---- writer ---------------------------------------------------------------------------------
struct Writer {
  YAML::Node root;
  YAML::Node at(const std::string& path) {
    const std::vector<std::string> parts = split_path(path);
    YAML::Node cur;
    cur.reset(root);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node next = cur[parts[i]];
      cur.reset(next);
    }
    YAML::Node leaf = cur[parts.back()];
    return leaf;
  }
  template <class T>
  void operator()(const std::string& path, T& v, const char*) {
    YAML::Node n = at(path);
    n = v;
  }
  void operator()(const std::string& path, std::vector<int64_t>& v, const char*) { seq(path, v); }
  void operator()(const std::string& path, std::vector<double>& v, const char*) { seq(path, v); }
  void operator()(const std::string& path, std::vector<std::string>& v, const char*) { seq(path, v); }
  template <class T>
  void seq(const std::string& path, const std::vector<T>& v) {
    YAML::Node n = at(path);
    n = YAML::Node(YAML::NodeType::Sequence);
    for (const auto& x : v) n.push_back(x);
    n.SetStyle(YAML::EmitterStyle::Flow);
  }
  void operator()(const std::string& path, std::map<int64_t, std::string>& v, const char*) {
    YAML::Node n = at(path);
    n = YAML::Node(YAML::NodeType::Map);
    for (const auto& [k, s] : v) n[std::to_string(k)] = s;
    n.SetStyle(YAML::EmitterStyle::Flow);
  }
  template <class E>
  void enumeration(const std::string& path, E& v, const char*, E (*)(const std::string&), const char* (*name)(E)) {
    YAML::Node n = at(path);
    n = std::string(name(v));
  }
  template <class E>
  void enumeration(const std::string& path, std::optional<E>& v, const char*, E (*)(const std::string&),
                   const char* (*name)(E)) {
    YAML::Node n = at(path);
    n = v ? std::string(name(*v)) : std::string();
  }
  void kinds(const std::string& path, std::vector<nn::LayerKind>& kinds, const char*) {
    for (auto& k : kinds) visit_kind(path + "." + k.name, k.attn, *this);
  }
};

// ---- schema -----------------------------------------------------------------------------------
struct Doc {
  std::ostringstream os;
  template <class T>
  static std::string show(const T& v) {
    std::ostringstream s;
    s << v;
    return s.str();
  }
  void line(const std::string& path, const std::string& type, const std::string& def, const char* doc) {
    os << "  " << path << " (" << type << ", default " << (def.empty() ? "''" : def) << ")\n      " << doc << "\n";
  }
  void operator()(const std::string& p, int64_t& v, const char* d) { line(p, "int", show(v), d); }
  void operator()(const std::string& p, double& v, const char* d) { line(p, "number", show(v), d); }
  void operator()(const std::string& p, bool& v, const char* d) { line(p, "bool", v ? "true" : "false", d); }
  void operator()(const std::string& p, std::string& v, const char* d) { line(p, "string", v, d); }
  template <class T>
  void operator()(const std::string& p, std::vector<T>& v, const char* d) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + show(v[i]);
    line(p, "list", s + "]", d);
  }
  void operator()(const std::string& p, std::map<int64_t, std::string>&, const char* d) { line(p, "map", "{}", d); }
  template <class E>
  void enumeration(const std::string& p, E& v, const char* d, E (*)(const std::string&), const char* (*name)(E)) {
    line(p, "name", name(v), d);
  }
  template <class E>
  void enumeration(const std::string& p, std::optional<E>& v, const char* d, E (*)(const std::string&),
                   const char* (*name)(E)) {
    line(p, "name", v ? name(*v) : "", d);
  }
  void kinds(const std::string& p, std::vector<nn::LayerKind>&, const char* d) {
    os << "  " << p << " (map, default {default: rope causal identity})\n      " << d << "\n";
    attn::AttentionSpec s;
    visit_kind(p + ".<kind>", s, *this);
  }
};

std::string apply_override(YAML::Node& root, const std::string& ov) {
  const size_t eq = ov.find('=');
  if (eq == std::string::npos || eq == 0)
    throw RecipeError("override '" + ov + "' must look like key.path=value (e.g. train.steps=100)");
  const std::string path = ov.substr(0, eq), value = ov.substr(eq + 1);
  const std::vector<std::string> parts = split_path(path);
  YAML::Node cur;
  cur.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (next.IsDefined() && !next.IsMap() && !next.IsNull())
      throw RecipeError("override '" + ov + "': '" + parts[i] + "' is not a section");
    cur.reset(next);
  }
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw RecipeError("override '" + ov + "': value is not valid YAML: " + e.what());
  }
  cur[parts.back()] = v;
  return path;
}

// checkpoint.init_from naming a directory a registered model source recognises (train/model_source.h,
// e.g. a Hugging Face directory) supplies every model field the recipe leaves out, and
// data.tokenizer when the recipe gives none: precedence command line > file > the directory's
// config (config.json) > defaults. A recipe whose model section is complete (a run's config.yaml)
// never reads the directory.
void fill_model_from_source(YAML::Node& root, const std::string& file) {
  const YAML::Node& c = root;
  auto is_map = [](const YAML::Node& n) { return n.IsDefined() && n.IsMap(); };  // (a missing key is invalid)
  const YAML::Node ck = c["checkpoint"];
  if (!is_map(ck) || !ck["init_from"] || !ck["init_from"].IsScalar()) return;
  const std::string from = ck["init_from"].Scalar();
  const YAML::Node model = c["model"];
  if (model.IsDefined() && !model.IsNull() && !model.IsMap()) return;  // the parser reports it
  Recipe defaults;
  Writer all;
  all.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(defaults, all);
  std::vector<std::string> missing;
  for (auto it = all.root["model"].begin(); it != all.root["model"].end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (!is_map(model) || !model[key]) missing.push_back(key);
  }
  if (missing.empty() || from.empty()) return;
  const ModelSource* source = find_model_source(from);
  if (!source) return;
  Recipe imported;
  try {
    imported.model.cfg = source->config(from);
  } catch (const ValueError& e) {
    throw RecipeError(file + ": checkpoint.init_from: " + e.what());
  }
  Writer w;
  w.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(imported, w);
  if (!is_map(model)) root["model"] = YAML::Node(YAML::NodeType::Map);
  YAML::Node m = root["model"];
  for (const auto& key : missing) m[key] = w.root["model"][key];
  const YAML::Node data = c["data"];
  if (!(is_map(data) && data["tokenizer"])) root["data"]["tokenizer"] = source->tokenizer(from);
}

}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  Reader rd;
  rd.file = file;
  try {
    rd.root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw RecipeError(file + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  if (rd.root.IsNull()) rd.root = YAML::Node(YAML::NodeType::Map);
  if (!rd.root.IsMap()) throw RecipeError(file + ": a recipe must be a map of sections (run, model, data, ...)");
  for (const auto& ov : overrides) rd.overridden.insert(apply_override(rd.root, ov));
  fill_model_from_source(rd.root, file);
  Recipe r;
  r.source_file = file;
  visit_fields(r, rd);
  rd.check_unknown(rd.root, "");
  r.validate();
  return r;
}

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream f(path);
  if (!f) throw RecipeError("cannot open recipe '" + path + "': no such file or not readable");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_recipe(ss.str(), path, overrides);
}

std::string to_yaml(const Recipe& r_in) {
  Recipe r = r_in;
  Writer w;
  w.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(r, w);
  YAML::Emitter e;
  e << w.root;
  return std::string("# resolved Horizon recipe: every field, defaults included\n") + e.c_str() + "\n";
}

std::string recipe_schema() {
  Recipe r;
  Doc d;
  visit_fields(r, d);
  return "Recipe fields (YAML sections; command-line overrides key.path=value take precedence):\n" + d.os.str();
}

std::string describe_kind(const attn::AttentionSpec& s) { return s.describe(); }

nn::ModelConfig Recipe::model_config() const {
  nn::ModelConfig c = model.cfg;
  c.train_context = data.seq_len;
  if (swan.enabled) c = swan_config(c, swan);
  // SCOPE layers remember the training length, so freeze_scopes keeps the training scopes when
  // a run is evaluated or fine-tuned at another length
  for (auto& k : c.kinds)
    if (k.attn.mask.kind == attn::MaskKind::Scope) k.attn.mask.scope_train_T = data.seq_len;
  return c;
}

std::vector<int64_t> Recipe::eval_lengths() const {
  if (!eval.opts.lengths.empty()) return eval.opts.lengths;
  return {data.seq_len, 2 * data.seq_len, 4 * data.seq_len, 8 * data.seq_len};
}

eval::EvalOptions recipe_eval_defaults() {
  eval::EvalOptions o;
  o.batch_size = 0;  // data.batch_size
  o.needles.samples = 5;
  return o;
}

eval::EvalOptions Recipe::eval_options() const {
  eval::EvalOptions o = eval.opts;
  o.train_T = data.seq_len;
  o.seed = static_cast<uint64_t>(run.seed);
  o.tokenizer = data.tokenizer;
  o.lengths = eval_lengths();
  o.batch_size = eval.opts.batch_size > 0 ? eval.opts.batch_size : data.batch_size;
  return o;
}

void Recipe::validate() const {
  auto bad = [&](const std::string& what) { throw RecipeError(source_file + ": " + what); };
  if (run.name.empty() || run.name.find('/') != std::string::npos) bad("run.name must be a non-empty name without '/'");
  if (run.tf32 && run.device != DeviceType::CUDA) bad("run.tf32 applies to run.device=cuda only");
  if (run.peak_tflops < 0) bad("run.peak_tflops must be >= 0");
  if (data.seq_len < 2) bad("data.seq_len must be >= 2");
  if (data.batch_size < 1) bad("data.batch_size must be >= 1");
  if (data.val_fraction < 0 || data.val_fraction >= 1) bad("data.val_fraction must be in [0, 1)");
  const bool file_source = is_file_source(data.source);
  const std::string src = name(data.source);
  if (file_source && data.files.empty()) bad("data.source is '" + src + "' but data.files lists no glob");
  if (!data.val_files.empty() && !file_source)
    bad("data.val_files is only read for data.source files / jsonl / tokens, not '" + src + "'");
  if (data.source == DataSource::Files)
    for (const auto& g : data.files) {
      const auto ends = [&](const char* e) { return g.size() >= std::strlen(e) && g.compare(g.size() - std::strlen(e), std::string::npos, e) == 0; };
      if (ends(".jsonl")) bad("data.files '" + g + "' looks like JSON Lines: set data.source: jsonl (data.source: files reads plain text)");
      if (ends(".bin")) bad("data.files '" + g + "' looks like a token file: set data.source: tokens (data.source: files reads plain text)");
    }
  if (data.source == DataSource::Jsonl && data.text_field.empty()) bad("data.text_field must name the JSON field holding the text");
  if (data.token_format != "auto" && data.token_format != "llmc" && data.token_format != "nanogpt")
    bad("data.token_format '" + data.token_format + "' is not one of: auto llmc nanogpt");
  if (optim.lr <= 0 || optim.muon_lr <= 0) bad("optim.lr and optim.muon_lr must be positive");
  if (schedule.warmup_steps < 0 || schedule.warmup_steps > train.steps)
    bad("schedule.warmup_steps (" + std::to_string(schedule.warmup_steps) + ") must be in [0, train.steps = " +
        std::to_string(train.steps) + "]");
  if (train.steps < 1) bad("train.steps must be >= 1");
  if (train.grad_accum < 1) bad("train.grad_accum must be >= 1");
  if (train.bucket_mb < 1) bad("train.bucket_mb must be >= 1");
  if (checkpoint.keep_last < 1) bad("checkpoint.keep_last must be >= 1");
  if (drope.at_step >= train.steps) bad("drope.at_step (" + std::to_string(drope.at_step) + ") must be < train.steps (" + std::to_string(train.steps) + ")");
  for (int64_t l : eval_lengths())
    if (l < 2) bad("eval.lengths must be >= 2");
  if (eval.opts.passkey_examples < 0) bad("eval.passkey_examples must be >= 0");
  for (double d : eval.opts.passkey_depths)
    if (d < 0 || d > 1) bad("eval.passkey_depths must lie in [0, 1]");
  for (double d : eval.opts.needles.depths)
    if (d < 0 || d > 1) bad("eval.needle_depths must lie in [0, 1]");
  for (double a : eval.opts.fit_swan_a)
    if (a <= 1) bad("eval.fit_swan_a values must be > 1 (g(n) = ln(a + n) / ln(a))");
  if (eval.opts.needles.samples < 1) bad("eval.needle_samples must be >= 1");
  if (eval.opts.probe_sequences < 0) bad("eval.probe_sequences must be >= 0");
  if (swan.enabled)
    for (const auto& p : swan.pattern)
      if (p != "global_nope" && p != "swa_rope") bad("swan.pattern may only name global_nope and swa_rope, got '" + p + "'");
  try {
    model_config().validate();
  } catch (const ValueError& e) {
    bad(std::string(e.what()) + " (data.seq_len = " + std::to_string(data.seq_len) + ")");
  }
}

}  // namespace hz::train
