#include "train/recipe.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "attention/spec_fields.h"
#include "autograd/functions.h"
#include "core/fields.h"
#include "core/json_guard.h"
#include "core/names.h"
#include "train/surgery.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <type_traits>
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

namespace {

// V provides: operator()(path, T& value, doc) for int64_t, double, bool, std::string and vectors
// of int64_t/double/std::string, a map<int64_t, std::string>, and
// enumeration(path, E& value, doc, parse, name) for enums, and kinds(path, kinds, doc).

template <class V>
void visit_fields(Recipe& r, V& v) {
  v("run.name", r.run.name, run_opt("run name: outputs go to <out_dir>/<name>/"));
  v("run.out_dir", r.run.out_dir, run_opt("directory holding run directories"));
  v("run.seed", r.run.seed, run_opt("seed of initialisation, data split and shuffling").in(0, 9e18));
  v("run.threads", r.run.threads, run_opt("OpenMP threads (0 = OMP_NUM_THREADS or all cores)").in(0, 4096));
  v("run.flush_denormals", r.run.flush_denormals,
    run_opt("CPU: flush subnormal floats to zero (FTZ+DAZ) on every thread; they otherwise cost a microcode assist "
            "each, and a model whose values underflow runs many times slower. false keeps IEEE subnormals"));
  v.enumeration("run.device", r.run.device, run_opt("cpu | cuda (several ranks: each uses the GPU of its local rank; NCCL all-reduces)"),
                parse_device_type, static_cast<const char* (*)(DeviceType)>(hz::name));
  v.enumeration("run.precision", r.run.precision,
    run_opt("fp32 | bf16: bf16 keeps f32 master weights and optimizer state, computes activations and GEMMs in bf16 "
    "(f32 accumulation), norms/softmax/loss/gradients in f32"),
    nn::parse_precision, static_cast<const char* (*)(nn::Precision)>(nn::name));
  v("run.tf32", r.run.tf32, run_opt("CUDA only: f32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative)"));
  v("run.peak_tflops", r.run.peak_tflops,
    run_opt("peak TFLOP/s for the logged MFU (0 = the GPU's known dense peak for the precision; no MFU on CPU)").at_least(0));
  v.enumeration("run.attention_backend", r.run.attention_backend,
                run_opt("CUDA attention: auto (cuDNN's fused attention for the layers it expresses, Horizon's kernels for "
                        "the rest) | horizon | cudnn (refuses a layer cuDNN cannot express, naming the ingredient); "
                        "horizon info shows each layer kind's route"),
                attn::parse_attn_backend, static_cast<const char* (*)(attn::AttnBackend)>(attn::name));
  nn::ModelConfig& m = r.model.cfg;
  v("model.vocab_size", m.vocab_size, arch("vocabulary size: at least the tokenizer's (byte: 259; horizon tokenize --info TOKENIZER)").in(1, 2147483647));
  v("model.d_model", m.d_model, arch("residual width C").in(1, 1 << 20));
  v("model.n_layers", m.n_layers, arch("number of blocks").in(1, 1 << 16));
  v("model.n_heads", m.n_heads, arch("query heads H").in(1, 1 << 16));
  v("model.n_kv_heads", m.n_kv_heads, arch("key/value heads (0 = n_heads; must divide n_heads)").in(0, 1 << 16));
  v("model.head_dim", m.head_dim, arch("head dim D (0 = d_model / n_heads)").in(0, 1 << 16));
  v("model.mlp_hidden", m.mlp_hidden, arch("MLP hidden width (0 = 4C, or 8C/3 rounded to 8 for swiglu)").in(0, 1 << 24));
  v.enumeration("model.mlp", m.mlp, arch("MLP: swiglu | relu2 | gelu"), nn::parse_mlp, nn::mlp_name);
  v("model.tie_embeddings", m.tie_embeddings, arch("output head shares the embedding matrix"));
  v("model.qkv_bias", m.qkv_bias, arch("additive biases on the q, k and v projections (Qwen2)"));
  v("model.norm_eps", m.norm_eps, arch("RMSNorm epsilon").above(0));
  v("model.init_std", m.init_std, run_opt("init std (residual projections get std / sqrt(2 n_layers))").at_least(0));
  v.kinds("model.layer_kinds", m.kinds, arch("named layer kinds: name -> attention fields (below)"));
  v("model.pattern", m.pattern, arch("layer kinds repeated over the layers, e.g. [global_nope, swa_rope, swa_rope, swa_rope]"));
  v("model.overrides", m.overrides, arch("explicit per-layer kinds: {layer index: kind name}"));
  v.enumeration("data.source", r.data.source,
                run_opt("corpus: bible (King James Bible, embedded in the binary) | files (text) | jsonl | tokens (llm.c / nanoGPT .bin) | "
                "passkey | kv | niah | niah_short (RULER needles on the Bible, data/needles.h)"),
                parse_data_source, static_cast<const char* (*)(DataSource)>(name));
  v("data.files", r.data.files, run_opt("globs of the corpus files for source=files / jsonl / tokens"));
  v("data.val_files", r.data.val_files, run_opt("globs of validation files of the same kind ([] = hold out data.val_fraction of the documents)"));
  v("data.text_field", r.data.text_field, run_opt("jsonl: the string field of each line's object holding the document"));
  v("data.token_format", r.data.token_format, run_opt("tokens: auto | llmc (256-int32 header) | nanogpt (raw uint16); documents cut at EOS/BOS"));
  v("data.tokenizer", r.data.tokenizer, run_opt("tokenizer: byte | PATH/tokenizer.json (Hugging Face BPE) | PATH.model (SentencePiece)"));
  v("data.val_fraction", r.data.val_fraction, run_opt("share of documents held out for validation").in(0, 1, /*hi_open=*/true));
  v("data.seq_len", r.data.seq_len, run_opt("training length T").in(2, 1 << 24));
  v("data.batch_size", r.data.batch_size, run_opt("sequences per step per rank (before accumulation)").in(1, 1 << 24));
  v.enumeration("data.documents", r.data.documents,
                run_opt("packed documents: stream (attend across them) | masked (each token sees its own document only; "
                        "training and evaluation batches alike)"),
                attn::parse_document_mode, static_cast<const char* (*)(attn::DocumentMode)>(attn::name));
  v("data.position_reset", r.data.position_reset,
    run_opt("masked documents: positions (RoPE, SWAN rows) restart at each document's start"));
  v("data.mix_task", r.data.mix_task,
    run_opt("retrieval mixture of a corpus run: '' | passkey | kv | niah | niah_short; data.mix_share of the training "
            "batches are that synthetic task's (whole batches, spread evenly over the steps), the rest the corpus's"));
  v("data.mix_share", r.data.mix_share, run_opt("share of the training batches from data.mix_task").in(0, 1));
  v("data.cache_dir", r.data.cache_dir, run_opt("prepared shards ('' = <out_dir>/_data/<source>-<tokenizer tag>[-<corpus hash>]-s<seed>-v<val_fraction>)"));
  v.enumeration("optim.name", r.optim.name, run_opt("adamw | muon (Muon on hidden matrices, AdamW on the rest)"), parse_optimizer,
                static_cast<const char* (*)(OptimizerKind)>(name));
  v("optim.lr", r.optim.lr, run_opt("AdamW learning rate").above(0));
  v("optim.weight_decay", r.optim.weight_decay, run_opt("decoupled weight decay on 2-D weights").at_least(0));
  v("optim.beta1", r.optim.beta1, run_opt("AdamW beta1").in(0, 1, true));
  v("optim.beta2", r.optim.beta2, run_opt("AdamW beta2").in(0, 1, true));
  v("optim.eps", r.optim.eps, run_opt("AdamW epsilon").above(0));
  v("optim.muon_lr", r.optim.muon_lr, run_opt("Muon learning rate").above(0));
  v("optim.muon_momentum", r.optim.muon_momentum, run_opt("Muon momentum mu").in(0, 1, true));
  v("optim.grad_clip", r.optim.grad_clip, run_opt("global gradient-norm clip (0 = off)").at_least(0));
  v.enumeration("schedule.kind", r.schedule.kind, run_opt("constant | cosine | wsd"), optim::parse_schedule,
                static_cast<const char* (*)(optim::ScheduleKind)>(optim::name));
  v("schedule.warmup_steps", r.schedule.warmup_steps, run_opt("linear warmup steps").at_least(0));
  v("schedule.min_ratio", r.schedule.min_ratio, run_opt("final lr / peak lr").in(0, 1));
  v("schedule.decay_fraction", r.schedule.decay_fraction, run_opt("wsd: share of steps in the linear cooldown").in(0, 1));
  v("train.steps", r.train.steps, run_opt("optimizer steps").at_least(1));
  v("train.grad_accum", r.train.grad_accum, run_opt("micro-batches per step").at_least(1));
  v.enumeration("train.recompute", r.train.recompute,
                run_opt("activation recomputation: none | attention (norm1 + attention sublayer recomputed in backward) | "
                        "layer (only each block's input kept); gradients bitwise equal to none"),
                nn::parse_recompute, static_cast<const char* (*)(nn::Recompute)>(nn::name));
  v.enumeration("train.positions", r.train.positions.scheme,
                run_opt("the positions training tokens carry: index | pose (PoSE: chunks shifted by random skips over "
                        "[0, position_max)) | randomized (sorted distinct samples of [0, position_max)) | continuous "
                        "(sorted real samples of [0, position_max)); RoPE and p-RoPE rotate by them, ALiBi and "
                        "scale-invariant attention take their distances, LogN by position, SWAN's row and Llama 4's "
                        "temperature read them; masks and evaluation keep indices"),
                data::parse_position_scheme, static_cast<const char* (*)(data::PositionScheme)>(data::name));
  v("train.position_max", r.train.positions.max,
    run_opt("pose / randomized / continuous: positions lie in [0, position_max) (the target length; > data.seq_len); "
            "refused with index positions, which do not read it").in(0, 1 << 30));
  v("train.pose_chunks", r.train.positions.chunks, run_opt("pose: chunks per sequence (PoSE's N)").in(1, 1 << 20));
  v("train.loss_chunk", r.train.loss_chunk,
    run_opt("rows of LM-head logits alive at a time (-1 = automatic: about 64 MiB of them, 1 GiB on a GPU; 0 = all); "
            "f32/bf16 losses and gradients on the CPU are bitwise the same for every value").at_least(-1));
  v("train.log_every", r.train.log_every, run_opt("console / metrics.jsonl interval").at_least(1));
  v("train.bucket_mb", r.train.bucket_mb, run_opt("data parallel: gradient all-reduce bucket size in MiB").in(1, 1 << 20));
  v("train.overlap_comm", r.train.overlap_comm, run_opt("data parallel: all-reduce buckets during backward (false: after it)"));
  v("parallel.shard_optimizer", r.parallel.shard_optimizer,
    run_opt("ZeRO-1: each data-parallel rank keeps and updates 1/N of the optimizer state (AdamW by element, Muon by "
            "whole matrix); parameters bitwise those of the replicated optimizer, checkpoints the same"));
  v("parallel.context", r.parallel.context,
    run_opt("context parallelism: N consecutive ranks share each sequence, cut into 2N zigzag chunks (rank r holds "
            "chunks r and 2N-1-r); window layers exchange a halo, the others parallel.context_exchange; mpirun -np = "
            "data-parallel ranks x N").in(1, 1 << 16));
  v.enumeration("parallel.context_exchange", r.parallel.context_exchange,
    run_opt("ring | all_gather: how layers that read the whole sequence (an unbounded head, a window longer than a "
            "chunk) exchange keys under parallel.context. ring: key/value blocks go round the group, each transfer "
            "overlapping the attention of the block held, and nothing of the gathered sequence is kept; all_gather: "
            "every rank gathers the whole sequence's keys (kept for the backward)"),
    dist::parse_context_exchange, static_cast<const char* (*)(dist::ContextExchange)>(dist::name));
  v("checkpoint.every", r.checkpoint.every, run_opt("checkpoint interval in steps (0 = only at the end)").at_least(0));
  v("checkpoint.keep_last", r.checkpoint.keep_last, run_opt("checkpoints kept").at_least(1));
  v("checkpoint.resume", r.checkpoint.resume, run_opt("'' | latest | path: continue a run exactly"));
  v("checkpoint.elastic", r.checkpoint.elastic,
    run_opt("resume a checkpoint written under another world size: the data continue from the same global position "
            "(rounded up to a whole share per rank); the steps that follow are not those the old world size would take"));
  v("checkpoint.init_from", r.checkpoint.init_from, run_opt("start from another run's weights (checkpoint or run dir)"));
  v("metrics.tensorboard", r.metrics.tensorboard,
    run_opt("TensorBoard event files in the run directory (events.out.tfevents.*): every number of metrics.jsonl at "
            "its step, each evaluation's, and the resolved recipe as text; a resume starts a new file (builds "
            "without protobuf write none and say so)"));
  v("eval.every", r.eval.every, run_opt("validation interval in steps (0 = only at the end)").at_least(0));
  v("eval.final", r.eval.final,
    run_opt("validate after the last step (false with eval.every 0: the run never evaluates; horizon eval can, later)"));
  v("eval.batches", r.eval.opts.batches, infer("validation batches per length").at_least(1));
  v("eval.batch_size", r.eval.opts.batch_size, infer("validation batch size (0 = data.batch_size)").in(0, 1 << 24));
  v("eval.lengths", r.eval.opts.lengths, infer("evaluation lengths ([] = 1x 2x 4x 8x data.seq_len)").in(2, 1 << 24));
  v.enumeration("eval.rope_scaling", r.eval.opts.inference.rope_scaling,
                infer("inference RoPE scaling: '' (as trained) | none | pi | ntk | dynamic_ntk | yarn | llama3 | longrope"),
                attn::parse_scaling, static_cast<const char* (*)(attn::RopeScaling)>(attn::name));
  v("eval.longrope_long_factors", r.eval.opts.inference.longrope_long_factors,
    infer("LongRoPE's searched rescale factors for eval.rope_scaling=longrope (head_dim/2 values, w_m / lambda_m "
          "beyond data.seq_len; a list or a JSON file: a list, LongRoPE's {long_factor, short_factor}, a config.json)")
        .above(0));
  v("eval.longrope_short_factors", r.eval.opts.inference.longrope_short_factors,
    infer("LongRoPE rescale factors within data.seq_len ([] = 1; a list or a JSON file)").above(0));
  v("eval.swan_a", r.eval.opts.inference.swan_a, infer("SWAN row scaling a on global NoPE layers (0 = off)").at_least(0));
  v("eval.drope_c", r.eval.opts.inference.drope_c, infer("DroPE temperature c: beta = 1 + c ln s (0 = off)"));
  v("eval.lampe", r.eval.opts.inference.lampe, infer("LaMPE on RoPE layers"));
  v("eval.lampe_L", r.eval.opts.inference.lampe_L, infer("LaMPE mapping scale L (0 = 3/4 of seq_len)").at_least(0));
  v("eval.lampe_a", r.eval.opts.inference.lampe_a, infer("LaMPE sigmoid slope a").at_least(0));
  v("eval.lampe_b", r.eval.opts.inference.lampe_b, infer("LaMPE sigmoid offset b"));
  v("eval.lampe_local", r.eval.opts.inference.lampe_local, infer("LaMPE local region").at_least(0));
  v("eval.lampe_sink", r.eval.opts.inference.lampe_sink, infer("LaMPE sink region").at_least(0));
  v("eval.fit_drope_c", r.eval.opts.fit_drope_c, infer("candidate DroPE c values; eval reports the best per length"));
  v("eval.passkey_examples", r.eval.opts.passkey_examples, infer("passkey retrieval examples per (length, depth) (0 = off)").at_least(0));
  v("eval.passkey_depths", r.eval.opts.passkey_depths, infer("needle depths for the passkey grid (fractions of the filler)").in(0, 1));
  v("eval.fit_swan_a", r.eval.opts.fit_swan_a, infer("candidate SWAN a values; eval reports the best per length and per 128-token window").above(1));
  v("eval.needle_tasks", r.eval.opts.needles.tasks, infer("RULER needle tasks answered by greedy decoding ([] = off): niah_single_2 niah_single_word niah_multikey_1 niah_multivalue niah_multiquery passkey (lm-eval's RULER names)"));
  v("eval.needle_samples", r.eval.opts.needles.samples, infer("needle examples per (task, length, depth)").at_least(1));
  v("eval.needle_depths", r.eval.opts.needles.depths, infer("needle depths (fractions of the haystack)").in(0, 1));
  v.enumeration("eval.needle_format", r.eval.opts.needles.format, infer("needle wording: ruler (RULER's templates) | short (fewer tokens)"),
                data::parse_needle_format, static_cast<const char* (*)(data::NeedleFormat)>(data::name));
  v("eval.needle_per_example", r.eval.opts.needles.per_example,
    infer("also write every needle example's output and score (needles_examples.jsonl)"));
  v("eval.probe_sequences", r.eval.opts.probe_sequences, infer("linear position probe on this many validation sequences (0 = off)").at_least(0));
  v("drope.at_step", r.drope.at_step, arch("drop position encodings at this step (-1 = never)").at_least(-1));
  v("drope.qk_norm", r.drope.qk_norm, arch("add full QK-norm at the drop (gains start at 1)"));
  v("drope.reset_optimizer", r.drope.reset_optimizer, run_opt("fresh optimizer and schedule at the drop"));
  v("drope.lr", r.drope.lr, run_opt("peak lr after a reset").above(0));
  v("drope.warmup_steps", r.drope.warmup_steps, run_opt("warmup after a reset").at_least(0));
  v("drope.keep_pairs", r.drope.keep_pairs, arch("partial DroPE: RoPE stays on these frequency pairs (0 = fastest)").at_least(0));
  v("drope.keep_fraction", r.drope.keep_fraction, arch("partial DroPE: RoPE stays on this fraction of the pairs (0 = drop all)").in(0, 1));
  v.enumeration("drope.keep_select", r.drope.keep_select, arch("partial DroPE: which pairs keep_fraction keeps: high | low | uniform"),
                attn::parse_rope_select, static_cast<const char* (*)(attn::RopeSelect)>(attn::name));
  v("swan.enabled", r.swan.enabled, arch("build a SWAN stack (global NoPE + SWA-RoPE) instead of model.pattern"));
  v("swan.pattern", r.swan.pattern, arch("SWAN layer pattern over global_nope / swa_rope"));
  v("swan.window", r.swan.window, arch("SWA window of the swa_rope layers").at_least(1));
  v("swan.rope_base", r.swan.rope_base, arch("RoPE base of the swa_rope layers (0 = as layer kind 'rope' or 10000)").at_least(0));
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
  // the JSON files number lists name: read a step above (read_recipe_files) and handed in, or
  // collected (named_files) instead of read
  const RecipeFiles* files = nullptr;
  std::vector<NamedFile>* collect = nullptr;

  // The node at a dotted path (Undefined when absent). A section on the way that is neither a map
  // nor empty (`train: -5`, `optim: [1, 2]`) is refused, not skipped.
  YAML::Node find(const std::string& path) const {
    YAML::Node cur;
    cur.reset(root);
    std::string at;
    for (const std::string& part : split_path(path)) {
      if (cur.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
      if (!cur.IsMap())
        fail(cur, at, std::string("expected a section (a map of fields), got a ") + (cur.IsSequence() ? "list" : "scalar '" + cur.Scalar() + "'"));
      YAML::Node next = cur[part];
      if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      cur.reset(next);
      at += (at.empty() ? "" : ".") + part;
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
  template <class T>
  T in_range(const YAML::Node& n, const std::string& path, T x, const Field& f) const {
    if (!f.contains(static_cast<double>(x)))
      fail(n, path, "must be " + (f.bounded() ? f.range() : std::string("finite")) + ", got " + n.Scalar() +
                        " (horizon train --schema lists each field's range)");
    if constexpr (std::is_integral_v<T>)
      if (f.hi == HUGE_VAL && static_cast<double>(x) > kIntCeiling)
        fail(n, path, "must be at most 2^40 = 1099511627776 (no integer field takes more), got " + n.Scalar());
    return x;
  }
  void operator()(const std::string& path, int64_t& v, const Field& f) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = in_range(n, path, convert<int64_t>(n, path, "an integer"), f);
  }
  void operator()(const std::string& path, double& v, const Field& f) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = in_range(n, path, convert<double>(n, path, "a number"), f);
  }
  void operator()(const std::string& path, bool& v, const Field&) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = convert<bool>(n, path, "true or false");
  }
  void operator()(const std::string& path, std::string& v, const Field&) {
    known.insert(path);
    YAML::Node n = find(path);
    if (n.IsDefined()) v = n.IsNull() ? std::string() : convert<std::string>(n, path, "a string");
  }
  template <class T>
  void list(const std::string& path, std::vector<T>& v, const char* tname, const Field* f = nullptr) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsSequence()) fail(n, path, std::string("expected a list of ") + tname);
    v.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      T x = convert<T>(n[i], at, tname);
      if constexpr (std::is_arithmetic_v<T>)
        if (f) x = in_range(n[i], at, x, *f);
      v.push_back(x);
    }
  }
  void operator()(const std::string& path, std::vector<int64_t>& v, const Field& f) { list(path, v, "integers", &f); }
  void operator()(const std::string& path, std::vector<double>& v, const Field& f) {
    const YAML::Node n = find(path);
    if (n.IsDefined() && n.IsScalar()) {  // a vector of numbers from a JSON file (factors_from_json)
      known.insert(path);
      const std::string name = convert<std::string>(n, path, "a list of numbers or a JSON file");
      if (collect) {  // relative to the working directory, else to the recipe's directory
        const bool beside = std::filesystem::path(name).is_relative() && !from_command_line(path);
        collect->push_back({path, name, beside ? (std::filesystem::path(file).parent_path() / name).string() : ""});
        return;
      }
      if (files && files->errors.count(path)) fail(n, path, files->errors.at(path));
      if (!files || !files->lists.count(path))
        fail(n, path, "names the file '" + name + "', which was not read (parse_recipe reads nothing: load_recipe reads "
                      "a recipe's files)");
      v = files->lists.at(path);
      for (size_t i = 0; i < v.size(); ++i) v[i] = in_range(n, path + "[" + std::to_string(i) + "]", v[i], f);
      return;
    }
    list(path, v, "numbers", &f);
  }
  void operator()(const std::string& path, std::vector<std::string>& v, const Field&) { list(path, v, "strings"); }
  void operator()(const std::string& path, std::map<int64_t, std::string>& v, const Field&) {
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
  void enumeration(const std::string& path, E& v, const Field&, E (*parse)(const std::string&), const char* (*)(E)) {
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
  void enumeration(const std::string& path, std::optional<E>& v, const Field&, E (*parse)(const std::string&),
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
  void kinds(const std::string& path, std::vector<nn::LayerKind>& kinds, const Field&) {
    known.insert(path);
    YAML::Node n = find(path);
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap()) fail(n, path, "expected a map {kind name: {pos: ..., mask: ..., ...}}");
    kinds.clear();
    for (auto it = n.begin(); it != n.end(); ++it) {
      nn::LayerKind k;
      k.name = convert<std::string>(it->first, path, "a kind name");
      // the name becomes a path component (model.layer_kinds.NAME.field): no dots or other punctuation
      const bool ident = !k.name.empty() && std::all_of(k.name.begin(), k.name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
      });
      if (!ident)
        fail(it->first, path, "kind name '" + k.name + "': use letters, digits, '_' and '-' only");
      if (!it->second.IsMap() && !it->second.IsNull()) fail(it->second, path + "." + k.name, "expected a map of attention fields");
      attn::visit_spec_fields(path + "." + k.name, k.attn, *this);
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

}  // namespace

std::vector<double> factors_from_json(const std::string& path, const std::string& field) {
  std::string text;  // a regular file of at most 16 MiB (core/file.h)
  if (const std::string why = read_file_capped(path, 16u << 20, text); !why.empty())
    throw ValueError("cannot read the JSON file '" + path + "': " + why);
  if (const std::string deep = json_depth_problem(text); !deep.empty()) throw ValueError("'" + path + "': " + deep);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ValueError("'" + path + "' is not JSON: " + e.what());
  }
  // LongRoPE's keys for the long / short factors; any other field takes a bare list
  const bool lr = field.rfind("longrope_", 0) == 0;
  const std::string key = field == "longrope_short_factors" ? "short_factor" : "long_factor";
  std::string where = "the file";
  const nlohmann::json* list = &j;
  if (lr && j.is_object()) {  // {long_factor, short_factor}, or a config.json's rope_scaling / rope_parameters
    const nlohmann::json* o = &j;
    for (const char* sec : {"rope_scaling", "rope_parameters"})
      if (j.contains(sec) && j[sec].is_object()) o = &j[sec];
    HZ_CHECK(o->contains(key), ValueError, "'", path, "' has no '", key, "' (a LongRoPE factor file holds long_factor ",
             "and short_factor lists, at the top or under rope_scaling / rope_parameters)");
    list = &(*o)[key];
    where = "its '" + key + "'";
  }
  HZ_CHECK(list->is_array(), ValueError, "'", path, "': ", where, " must be a list of numbers",
           lr ? " (or an object with long_factor / short_factor)" : "");
  HZ_CHECK(list->size() <= (1u << 20), ValueError, "'", path, "': ", list->size(), " values; at most 2^20");
  std::vector<double> v;
  for (const auto& x : *list) {
    HZ_CHECK(x.is_number(), ValueError, "'", path, "': ", where, " holds ", x.dump().substr(0, 40), ", not a number");
    v.push_back(x.get<double>());
  }
  return v;
}

namespace {

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
  void operator()(const std::string& path, T& v, const Field&) {
    YAML::Node n = at(path);
    n = v;
  }
  void operator()(const std::string& path, std::vector<int64_t>& v, const Field&) { seq(path, v); }
  void operator()(const std::string& path, std::vector<double>& v, const Field&) { seq(path, v); }
  void operator()(const std::string& path, std::vector<std::string>& v, const Field&) { seq(path, v); }
  template <class T>
  void seq(const std::string& path, const std::vector<T>& v) {
    YAML::Node n = at(path);
    n = YAML::Node(YAML::NodeType::Sequence);
    for (const auto& x : v) n.push_back(x);
    n.SetStyle(YAML::EmitterStyle::Flow);
  }
  void operator()(const std::string& path, std::map<int64_t, std::string>& v, const Field&) {
    YAML::Node n = at(path);
    n = YAML::Node(YAML::NodeType::Map);
    for (const auto& [k, s] : v) n[std::to_string(k)] = s;
    n.SetStyle(YAML::EmitterStyle::Flow);
  }
  template <class E>
  void enumeration(const std::string& path, E& v, const Field&, E (*)(const std::string&), const char* (*name)(E)) {
    YAML::Node n = at(path);
    n = std::string(name(v));
  }
  template <class E>
  void enumeration(const std::string& path, std::optional<E>& v, const Field&, E (*)(const std::string&),
                   const char* (*name)(E)) {
    YAML::Node n = at(path);
    n = v ? std::string(name(*v)) : std::string();
  }
  void kinds(const std::string& path, std::vector<nn::LayerKind>& kinds, const Field&) {
    for (auto& k : kinds) attn::visit_spec_fields(path + "." + k.name, k.attn, *this);
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
  void line(const std::string& path, const std::string& type, const std::string& def, const Field& f) {
    const std::string range = f.range();
    os << "  " << path << " (" << type << ", default " << (def.empty() ? "''" : def) << (range.empty() ? "" : ", " + range)
       << "; " << role_name(f.role) << ")\n      " << f.doc << "\n";
  }
  void operator()(const std::string& p, int64_t& v, const Field& f) { line(p, "int", show(v), f); }
  void operator()(const std::string& p, double& v, const Field& f) { line(p, "number", show(v), f); }
  void operator()(const std::string& p, bool& v, const Field& f) { line(p, "bool", v ? "true" : "false", f); }
  void operator()(const std::string& p, std::string& v, const Field& f) { line(p, "string", v, f); }
  template <class T>
  void operator()(const std::string& p, std::vector<T>& v, const Field& f) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + show(v[i]);
    line(p, "list", s + "]", f);
  }
  void operator()(const std::string& p, std::map<int64_t, std::string>&, const Field& f) { line(p, "map", "{}", f); }
  template <class E>
  void enumeration(const std::string& p, E& v, const Field& f, E (*)(const std::string&), const char* (*name)(E)) {
    line(p, "name", name(v), f);
  }
  template <class E>
  void enumeration(const std::string& p, std::optional<E>& v, const Field& f, E (*)(const std::string&),
                   const char* (*name)(E)) {
    line(p, "name", v ? name(*v) : "", f);
  }
  void kinds(const std::string& p, std::vector<nn::LayerKind>&, const Field& f) {
    os << "  " << p << " (map, default {default: rope causal identity}; " << role_name(f.role) << ")\n      " << f.doc << "\n";
    attn::AttentionSpec s;
    attn::visit_spec_fields(p + ".<kind>", s, *this);
  }
};

// Every key of every map of the document (sections, layer kinds and flow maps alike) must be a
// name, and appear once: a list or map used as a key (`{lengths, [256, 512]}` makes [256, 512] a
// key) is refused with its line, and so is a repeated key, naming the lines of both (yaml-cpp
// keeps both entries and lookups find the first).
void check_keys(const YAML::Node& n, const std::string& prefix, const std::string& file) {
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) check_keys(n[i], prefix + "[" + std::to_string(i) + "]", file);
    return;
  }
  if (!n.IsMap()) return;
  std::map<std::string, YAML::Mark> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar())
      throw RecipeError(fmt_line(file, it->first.Mark()) + ": a key in '" + (prefix.empty() ? std::string("(top level)") : prefix) +
                        "' is a " + (it->first.IsSequence() ? "list" : it->first.IsMap() ? "map" : "null") +
                        ", not a name (a missing ':' after the key before it?)");
    const std::string key = it->first.Scalar();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    const auto [first, fresh] = seen.emplace(key, it->first.Mark());
    if (!fresh)
      throw RecipeError(fmt_line(file, it->first.Mark()) + ": duplicate key '" + path + "' (first at " +
                        fmt_line(file, first->second) + "); a key may appear once per section");
    check_keys(it->second, path, file);
  }
}

// ---- field values by path (architecture comparison) -------------------------------------------
struct Flatten {
  std::map<std::string, std::pair<Role, std::string>> fields;
  void put(const std::string& p, const Field& f, const std::string& v) { fields[p] = {f.role, v}; }
  template <class T>
  void operator()(const std::string& p, T& v, const Field& f) {
    put(p, f, Doc::show(v));
  }
  void operator()(const std::string& p, bool& v, const Field& f) { put(p, f, v ? "true" : "false"); }
  void operator()(const std::string& p, std::string& v, const Field& f) { put(p, f, "'" + v + "'"); }
  template <class T>
  void operator()(const std::string& p, std::vector<T>& v, const Field& f) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + Doc::show(v[i]);
    put(p, f, s + "]");
  }
  void operator()(const std::string& p, std::map<int64_t, std::string>& v, const Field& f) {
    std::string s = "{";
    for (const auto& [k, n] : v) s += (s.size() > 1 ? ", " : "") + std::to_string(k) + ": " + n;
    put(p, f, s + "}");
  }
  template <class E>
  void enumeration(const std::string& p, E& v, const Field& f, E (*)(const std::string&), const char* (*name)(E)) {
    put(p, f, name(v));
  }
  template <class E>
  void enumeration(const std::string& p, std::optional<E>& v, const Field& f, E (*)(const std::string&),
                   const char* (*name)(E)) {
    put(p, f, v ? name(*v) : "''");
  }
  void kinds(const std::string& p, std::vector<nn::LayerKind>& kinds, const Field& f) {
    std::string names;
    for (auto& k : kinds) names += (names.empty() ? "" : ", ") + k.name;
    put(p, f, "{" + names + "}");
    for (auto& k : kinds) attn::visit_spec_fields(p + "." + k.name, k.attn, *this);
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

// The model fields a recipe (after its overrides) leaves out.
std::vector<std::string> missing_model_fields(const YAML::Node& root) {
  auto is_map = [](const YAML::Node& n) { return n.IsDefined() && n.IsMap(); };  // (a missing key is invalid)
  const YAML::Node model = root["model"];
  Recipe defaults;
  Writer all;
  all.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(defaults, all);
  std::vector<std::string> missing;
  for (auto it = all.root["model"].begin(); it != all.root["model"].end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (!is_map(model) || !model[key]) missing.push_back(key);
  }
  return missing;
}

// checkpoint.init_from when it names a directory to fill the model from: set, and some model field
// left out (a recipe whose model section is complete, such as a run's config.yaml, never needs it).
std::string fill_dir_of(const YAML::Node& root) {
  auto is_map = [](const YAML::Node& n) { return n.IsDefined() && n.IsMap(); };
  const YAML::Node ck = root["checkpoint"];
  if (!is_map(ck) || !ck["init_from"] || !ck["init_from"].IsScalar()) return "";
  const YAML::Node model = root["model"];
  if (model.IsDefined() && !model.IsNull() && !model.IsMap()) return "";  // the parser reports it
  return missing_model_fields(root).empty() ? "" : ck["init_from"].Scalar();
}

// Every model field the recipe leaves out from fill.model, and data.tokenizer when it gives none.
void fill_model(YAML::Node& root, const ModelFill& fill) {
  const std::vector<std::string> missing = missing_model_fields(root);
  if (missing.empty()) return;
  Recipe imported;
  imported.model.cfg = fill.model;
  Writer w;
  w.root = YAML::Node(YAML::NodeType::Map);
  visit_fields(imported, w);
  const YAML::Node model = root["model"];
  if (!(model.IsDefined() && model.IsMap())) root["model"] = YAML::Node(YAML::NodeType::Map);
  YAML::Node m = root["model"];
  for (const auto& key : missing) m[key] = w.root["model"][key];
  const YAML::Node data = root["data"];
  if (!(data.IsDefined() && data.IsMap() && data["tokenizer"])) root["data"]["tokenizer"] = fill.tokenizer;
}

}  // namespace

YAML::Node load_yaml_document(const std::string& text, const std::string& file) {
  // A second document: content after a marker line ('---' or '...' at column 0, which ends a
  // document wherever it stands) that follows content. Found by lines rather than YAML::LoadAll,
  // which in yaml-cpp 0.7 never returns on some inputs (a plain scalar starting with ',' allocates
  // nodes until the memory runs out: found by the fuzzer).
  std::istringstream in(text);
  std::string line;
  int64_t n = 0;
  bool content = false, ended = false;  // content seen; a marker line after it
  int64_t first = 0;                    // the first line with content
  while (std::getline(in, line)) {
    ++n;
    const bool marker = (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) &&
                        (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    const size_t at = line.find_first_not_of(" \t\r", marker ? 3 : 0);
    const bool has_content = at != std::string::npos && line[at] != '#';
    if (marker) ended |= content;
    if (has_content && ended)
      throw RecipeError(file + ":" + std::to_string(n) +
                        ": a second YAML document (after '---' or '...'); a recipe is one document: remove it or "
                        "merge its fields into the first");
    if (has_content && !content) first = n;
    content |= has_content;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw RecipeError(file + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  // yaml-cpp gives an empty document for text it stops reading at once (a line starting with ',', '%',
  // an anchor or a tag alone): refuse rather than read the defaults
  if (root.IsNull() && content)
    throw RecipeError(file + ":" + std::to_string(first) +
                      ": YAML syntax error: the text does not read as a YAML document (does a line start with ',', "
                      "'%', '&' or '!'?)");
  return root;
}

namespace {

// The recipe's YAML with its overrides applied, its keys checked.
Reader read_root(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  Reader rd;
  rd.file = file;
  rd.root = load_yaml_document(text, file);
  if (rd.root.IsNull()) rd.root = YAML::Node(YAML::NodeType::Map);
  if (!rd.root.IsMap()) throw RecipeError(file + ": a recipe must be a map of sections (run, model, data, ...)");
  check_keys(rd.root, "", file);
  for (const auto& ov : overrides) rd.overridden.insert(apply_override(rd.root, ov));
  return rd;
}

// Settings that parse and would train, but not what they say, refused with the key's file and line
// (or its command-line override) like any field error: a prefix-LM prefix as long as the sequence
// leaves each sequence one target or none (the loss skips the targets a prefix shows its queries), and
// train.position_max is read by drawn positions only (with index positions it would change nothing).
void check_settings(const Recipe& r, const Reader& rd) {
  const int64_t T = r.data.seq_len;
  for (const auto& k : r.model.cfg.kinds)
    if (k.attn.mask.prefix >= T) {
      const std::string path = "model.layer_kinds." + k.name + ".prefix";
      rd.fail(rd.find(path), path,
              std::to_string(k.attn.mask.prefix) + " is at least data.seq_len = " + std::to_string(T) +
                  ": a prefix-LM leaves the targets after its prefix to the loss, so each sequence would train " +
                  (k.attn.mask.prefix == T ? "one target" : "no target") + "; set it below data.seq_len");
    }
  if (r.train.positions.scheme == data::PositionScheme::Index && r.train.positions.max != 0)
    rd.fail(rd.find("train.position_max"), "train.position_max",
            std::to_string(r.train.positions.max) +
                " is read by drawn positions only (train.positions pose, randomized or continuous); with index "
                "positions it changes nothing: remove it, or set train.positions");
}

}  // namespace

namespace {
Recipe parse(const std::string& text, const std::string& file, const std::vector<std::string>& overrides,
             const ModelFill* fill, const RecipeFiles* files, bool trained) {
  Reader rd = read_root(text, file, overrides);
  rd.files = files;
  if (fill) fill_model(rd.root, *fill);
  Recipe r;
  r.source_file = file;
  visit_fields(r, rd);
  rd.check_unknown(rd.root, "");
  if (!trained) check_settings(r, rd);
  r.validate();
  return r;
}
}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& file, const std::vector<std::string>& overrides,
                    const ModelFill* fill, const RecipeFiles* files) {
  return parse(text, file, overrides, fill, files, /*trained=*/false);
}

Recipe parse_trained_recipe(const std::string& text, const std::string& file, const std::vector<std::string>& overrides,
                            const RecipeFiles* files) {
  return parse(text, file, overrides, nullptr, files, /*trained=*/true);
}

Recipe load_trained_recipe(const std::string& path) { return parse_trained_recipe(read_recipe_file(path), path); }

std::string model_fill_dir(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  return fill_dir_of(read_root(text, file, overrides).root);
}

std::vector<NamedFile> named_files(const std::string& text, const std::string& file,
                                   const std::vector<std::string>& overrides) {
  Reader rd = read_root(text, file, overrides);
  std::vector<NamedFile> out;
  rd.collect = &out;
  Recipe r;
  visit_fields(r, rd);
  return out;
}

RecipeFiles read_recipe_files(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  RecipeFiles files;
  for (const NamedFile& nf : named_files(text, file, overrides)) {
    std::error_code ec;
    const std::string p = !nf.beside_recipe.empty() && !std::filesystem::exists(nf.name, ec) ? nf.beside_recipe : nf.name;
    try {
      files.lists[nf.field] = factors_from_json(p, nf.field.substr(nf.field.rfind('.') + 1));
    } catch (const ValueError& e) {
      files.errors[nf.field] = e.what();  // parse_recipe reports it at the field's line
    }
  }
  return files;
}

std::string read_recipe_file(const std::string& path) {
  std::string text;  // a regular file (core/file.h); a recipe is a few KB
  if (const std::string why = read_file_capped(path, kMaxRecipeBytes, text); !why.empty())
    throw RecipeError("cannot open recipe '" + path + "': " + why);
  return text;
}

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_recipe_file(path);
  const RecipeFiles files = read_recipe_files(text, path, overrides);
  return parse_recipe(text, path, overrides, nullptr, &files);
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

std::vector<std::string> architecture_changes(const Recipe& trained, const Recipe& now) {
  Recipe a = trained, b = now;
  Flatten fa, fb;
  visit_fields(a, fa);
  visit_fields(b, fb);
  std::vector<std::string> out;
  const std::string absent = "(absent)";
  auto value = [&](const Flatten& f, const std::string& p) {
    const auto it = f.fields.find(p);
    return it == f.fields.end() ? absent : it->second.second;
  };
  std::set<std::string> paths;
  for (const auto& [p, rv] : fa.fields)
    if (rv.first == Role::Architecture) paths.insert(p);
  for (const auto& [p, rv] : fb.fields)
    if (rv.first == Role::Architecture) paths.insert(p);
  for (const auto& p : paths)
    if (value(fa, p) != value(fb, p)) out.push_back(p + ": " + value(fa, p) + " -> " + value(fb, p));
  return out;
}

void check_architecture(const Recipe& trained, const Recipe& now, const std::string& what) {
  const std::vector<std::string> changes = architecture_changes(trained, now);
  if (changes.empty()) return;
  std::string list;
  for (const auto& c : changes) list += "\n  " + c;
  throw RecipeError(
      what + ": the overrides change the architecture the checkpoint was trained with (fields marked "
      "'architecture' in horizon train --schema):" + list +
      "\nA checkpoint's architecture is its own. To change it on purpose, start a new run from it with "
      "checkpoint.init_from and a surgery recipe: DroPE (drop position encodings: recipes/drope_recalibrate.yaml, "
      "drope.* fields) or SWAN (recipes/swan_continue.yaml, swan.* fields). Inference-time options stay free: "
      "eval.* (rope_scaling, lampe, drope_c, swan_a), layer kinds' rope_scaling / rope_factor / yarn_* / llama3_* "
      "and freeze_scopes.");
}

nn::ModelConfig Recipe::model_config() const {
  nn::ModelConfig c = model.cfg;
  c.train_len = data.seq_len;
  if (swan.enabled) c = swan_config(c, swan);
  // SCOPE layers remember the training length, so freeze_scopes keeps the training scopes when
  // a run is evaluated or fine-tuned at another length
  for (auto& k : c.kinds)
    if (k.attn.mask.kind == attn::MaskKind::Scope) k.attn.mask.scope_train_len = data.seq_len;
  return c;
}

std::vector<int64_t> Recipe::eval_lengths() const {
  if (!eval.opts.lengths.empty()) return eval.opts.lengths;
  return {data.seq_len, 2 * data.seq_len, 4 * data.seq_len, 8 * data.seq_len};
}

int64_t Recipe::loss_chunk_rows() const {
  if (train.loss_chunk >= 0) return train.loss_chunk;
  return nn::Transformer::auto_loss_chunk(model_config().vocab_size, run.device == DeviceType::CUDA);
}

eval::EvalOptions recipe_eval_defaults() {
  eval::EvalOptions o;
  o.batch_size = 0;  // data.batch_size
  o.needles.samples = 5;
  return o;
}

eval::EvalOptions Recipe::eval_options() const {
  eval::EvalOptions o = eval.opts;
  o.train_len = data.seq_len;
  o.seed = static_cast<uint64_t>(run.seed);
  o.tokenizer = data.tokenizer;
  o.lengths = eval_lengths();
  o.batch_size = eval.opts.batch_size > 0 ? eval.opts.batch_size : data.batch_size;
  o.documents = {data.documents, data.position_reset};
  return o;
}

std::vector<std::pair<std::string, attn::LayerRoute>> Recipe::attention_routes() const {
  const nn::ModelConfig m = model_config();  // SWAN's converted kinds included
  const DType dt = run.precision == nn::Precision::BF16 ? DType::BF16 : m.dtype;
  std::vector<std::pair<std::string, attn::LayerRoute>> routes;
  for (const auto& k : m.kinds) {
    try {
      routes.emplace_back(k.name, attn::route_layer(k.attn, m.n_heads, m.kv_heads(), m.hdim(), data.seq_len,
                                                    data.seq_len, dt, data.documents == attn::DocumentMode::Masked,
                                                    run.attention_backend));
    } catch (const hz::Error& e) {
      throw RecipeError(source_file + ": layer kind '" + k.name + "': " + e.what());
    }
  }
  return routes;
}

void Recipe::validate() const {
  auto bad = [&](const std::string& what) { throw RecipeError(source_file + ": " + what); };
  if (run.name.empty() || run.name.find('/') != std::string::npos) bad("run.name must be a non-empty name without '/'");
  if (run.tf32 && run.device != DeviceType::CUDA) bad("run.tf32 applies to run.device=cuda only");
  if (run.peak_tflops < 0) bad("run.peak_tflops must be >= 0");
  if (data.seq_len < 2) bad("data.seq_len must be >= 2");
  if (data.batch_size < 1) bad("data.batch_size must be >= 1");
  if (parallel.context > 1)
    for (const auto& k : model.cfg.kinds)
      if (k.attn.mask.prefix > 0)
        bad("layer kind '" + k.name + "' has a prefix (prefix-LM): its prefix attends ahead, which context "
            "parallelism's exchanges do not carry; train it with parallel.context=1");
  if (parallel.context > 1 && data.seq_len < 2 * parallel.context)
    bad("parallel.context=" + std::to_string(parallel.context) + " cuts each sequence into " +
        std::to_string(2 * parallel.context) + " chunks: data.seq_len must be at least that");
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
  if (data.position_reset && data.documents != attn::DocumentMode::Masked)
    bad("data.position_reset needs data.documents: masked (with stream documents a token attends across the "
        "boundary, where restarted positions would put two documents' tokens at the same position)");
  if (data.documents == attn::DocumentMode::Masked && !file_source && data.source != DataSource::Bible)
    bad("data.documents: masked needs a corpus; the synthetic '" + src + "' sequences hold one example each");
  if (data.source == DataSource::Jsonl && data.text_field.empty()) bad("data.text_field must name the JSON field holding the text");
  if (!data.mix_task.empty()) {
    DataSource mix = DataSource::Bible;
    try {
      mix = parse_data_source(data.mix_task);
    } catch (const ValueError& e) {
      bad(std::string("data.mix_task: ") + e.what());
    }
    if (!is_synthetic(mix)) bad("data.mix_task '" + data.mix_task + "' is a corpus; the mixture takes a synthetic task: passkey kv niah niah_short");
    if (is_synthetic(data.source)) bad("data.mix_task mixes a synthetic task into a corpus run; data.source is already the synthetic '" + src + "'");
    if (data.mix_share <= 0 || data.mix_share >= 1) bad("data.mix_task needs data.mix_share in (0, 1), got " + std::to_string(data.mix_share));
  } else if (data.mix_share != 0) {
    bad("data.mix_share is set but data.mix_task is empty: name the synthetic task to mix in");
  }
  if (data.token_format != "auto" && data.token_format != "llmc" && data.token_format != "nanogpt")
    bad("data.token_format '" + data.token_format + "' is not one of: auto llmc nanogpt");
  if (optim.lr <= 0 || optim.muon_lr <= 0) bad("optim.lr and optim.muon_lr must be positive");
  if (schedule.warmup_steps < 0 || schedule.warmup_steps > train.steps)
    bad("schedule.warmup_steps (" + std::to_string(schedule.warmup_steps) + ") must be in [0, train.steps = " +
        std::to_string(train.steps) + "]");
  if (train.steps < 1) bad("train.steps must be >= 1");
  if (train.grad_accum < 1) bad("train.grad_accum must be >= 1");
  if (train.bucket_mb < 1) bad("train.bucket_mb must be >= 1");
  if (train.positions.scheme != data::PositionScheme::Index) {
    const std::string pn = std::string("train.positions ") + data::name(train.positions.scheme);
    if (train.positions.max <= data.seq_len)
      bad(pn + " spreads data.seq_len = " + std::to_string(data.seq_len) +
          " tokens over [0, train.position_max): set train.position_max above it (the target length), got " +
          std::to_string(train.positions.max));
    if (train.positions.scheme == data::PositionScheme::PoSE && train.positions.chunks > data.seq_len)
      bad("train.pose_chunks (" + std::to_string(train.positions.chunks) + ") exceeds data.seq_len");
    if (data.documents != attn::DocumentMode::Stream)
      bad(pn + " needs data.documents: stream (packed documents define their own positions)");
    bool reads = false;
    const std::vector<std::string> used = model.cfg.layer_kind_names();  // the layers' kinds, not every kind listed
    for (const auto& k : model.cfg.kinds)
      if (std::find(used.begin(), used.end(), k.name) != used.end())
        reads |= k.attn.rotary() || k.attn.logits_read_positions();
    if (!reads)
      bad(pn + ": no layer reads positions (RoPE, p-RoPE, ALiBi, scale-invariant attention, LogN by position, SWAN's "
               "row scale or Llama 4's temperature): the drawn positions would change nothing");
  }
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
    if (drope.at_step >= 0 && drope.partial()) drope_config(model_config(), drope.qk_norm, drope).validate();
  } catch (const ValueError& e) {
    bad(std::string(e.what()) + " (data.seq_len = " + std::to_string(data.seq_len) + ")");
  }
  if (run.attention_backend == attn::AttnBackend::CuDNN) {
    if (run.device != DeviceType::CUDA) bad("run.attention_backend: cudnn applies to run.device=cuda only");
    (void)attention_routes();  // a layer kind cuDNN cannot express: refused, naming the ingredient
  }
}

}  // namespace hz::train
