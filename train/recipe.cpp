// Horizon: the recipe's meaning: its name tables, the checks across fields (validate), the model, evaluation
// options and attention routes it implies, and the files it names. Its fields are train/recipe_fields.h's,
// read, written and documented by the YAML engine (train/recipe_yaml.cpp).
#include "train/recipe.h"

#include <nlohmann/json.hpp>

#include "autograd/functions.h"
#include "core/json_guard.h"
#include "core/names.h"
#include "train/surgery.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

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

Recipe load_trained_recipe(const std::string& path) { return parse_trained_recipe(read_recipe_file(path), path); }

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

std::string describe_kind(const attn::AttentionSpec& s) { return s.describe(); }

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
  if (run.exact_f32_attention && (run.device != DeviceType::CUDA || run.precision != nn::Precision::FP32))
    bad("run.exact_f32_attention applies to run.device=cuda with run.precision=fp32 only");
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
  if (eval.opts.needles.retrieval_heads && eval.opts.needles.tasks.empty() && eval.opts.passkey_examples <= 0)
    bad("eval.retrieval_heads scores heads on the needle tasks' and the passkey grid's answers: set "
        "eval.needle_tasks=[...] or eval.passkey_examples=N");
  if (eval.opts.needles.retrieval_heads && eval.opts.inference.lampe)
    bad("eval.retrieval_heads reads the attention of every layer, and LaMPE's layers attend without it: drop eval.lampe");
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
