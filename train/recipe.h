// Horizon: typed, strict, documented recipes (YAML).
//
// Every field lives in one place: visit_fields() below names it with its dotted path, its
// default (the struct initialiser) and its documentation. Parsing, writing the resolved recipe,
// `horizon train --schema` and unknown-key detection are all driven from that list, so they
// cannot drift apart. Precedence: command-line overrides `key.path=value` > file > defaults.
// Errors name the file, the line and the key path.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/documents.h"
#include "attention/spec.h"
#include "data/positions.h"
#include "distributed/context/exchange.h"
#include "eval/options.h"
#include "nn/autocast.h"
#include "nn/transformer.h"
#include "optim/schedule.h"
#include "train/surgery_options.h"  // DropeSection, SwanSection

namespace YAML {
class Node;
}

namespace hz::train {

struct RecipeError : hz::ValueError {
  using hz::ValueError::ValueError;
};

// The recipe's named choices, one name table each (recipe.cpp).
enum class DataSource : uint8_t { Bible, Files, Jsonl, Tokens, Passkey, KV, Niah, NiahShort, Count };
enum class OptimizerKind : uint8_t { AdamW, Muon, Count };
static_assert(static_cast<int>(DataSource::Count) == 8 && static_cast<int>(OptimizerKind::Count) == 2,
              "update the name tables in recipe.cpp");
const char* name(DataSource s);          // bible files jsonl tokens passkey kv niah niah_short
const char* name(OptimizerKind k);       // adamw muon
DataSource parse_data_source(const std::string& s);  // ValueError listing the names
OptimizerKind parse_optimizer(const std::string& s);
// Synthetic sources generate their examples (data/synthetic.h) and have no text to hold out.
bool is_synthetic(DataSource s);
// Sources read from data.files (text, JSON Lines, token files).
bool is_file_source(DataSource s);

struct RunSection {
  std::string name = "run";
  std::string out_dir = "runs";
  int64_t seed = 1234;
  int64_t threads = 0;  // OpenMP threads; 0 = OMP_NUM_THREADS / all cores
  bool flush_denormals = true;  // CPU: FTZ+DAZ on every thread (core/device.h); false keeps IEEE subnormals
  DeviceType device = DeviceType::CPU;          // cpu | cuda (several ranks: the GPU of the local rank)
  nn::Precision precision = nn::Precision::FP32;  // fp32 | bf16 (f32 master weights and optimizer state, bf16 activations/GEMMs)
  bool tf32 = false;               // CUDA: f32 GEMMs on TF32 tensor cores (fp32 runs only)
  bool exact_f32_attention = false;  // CUDA, fp32: attention in exact f32 (reference kernels), not bf16 pairs on tensor cores
  double peak_tflops = 0;          // MFU denominator; 0 = known GPU peak (H100/H200: 989 bf16, 495 tf32, 67 fp32), none on CPU
  attn::AttnBackend attention_backend = attn::AttnBackend::Auto;  // CUDA: cuDNN's fused attention / Horizon's kernels
};

struct ModelSection {
  nn::ModelConfig cfg;  // kinds/pattern/overrides filled from layer_kinds/pattern/overrides
};

struct DataSection {
  DataSource source = DataSource::Bible;
  std::vector<std::string> files;     // globs for source=files / jsonl / tokens
  std::vector<std::string> val_files; // globs of validation documents ([] = split data.files by val_fraction)
  std::string text_field = "text";    // jsonl: the string field holding a document's text
  std::string token_format = "auto";  // tokens: auto | llmc | nanogpt
  std::string tokenizer = "byte";     // byte | PATH/tokenizer.json | PATH.model
  double val_fraction = 0.05;
  int64_t seq_len = 256;
  int64_t batch_size = 8;
  // stream: a sequence packs documents and attends across them (positions count from its start);
  // masked: each token attends within its document only (attention/documents.h)
  attn::DocumentMode documents = attn::DocumentMode::Stream;
  bool position_reset = false;        // masked: positions restart at each document's start
  std::string cache_dir = "";         // prepared shards ("" = <out_dir>/_data/<source>-<tokenizer tag>-...)
  // A corpus run's retrieval mixture: this share of the training batches are the synthetic task's
  // (train/data.h: which batches is a function of the micro-batch count, so resuming repeats it)
  std::string mix_task = "";          // "" | passkey | kv | niah | niah_short
  double mix_share = 0.0;
};

struct OptimSection {
  OptimizerKind name = OptimizerKind::AdamW;  // Muon for hidden matrices, AdamW for the rest
  double lr = 3e-3;                   // AdamW learning rate
  double weight_decay = 0.1;          // on 2-D weights only
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double muon_lr = 0.02;
  double muon_momentum = 0.95;
  double grad_clip = 1.0;             // global norm; 0 disables
};

struct ScheduleSection {
  optim::ScheduleKind kind = optim::ScheduleKind::Cosine;
  int64_t warmup_steps = 20;
  double min_ratio = 0.1;
  double decay_fraction = 0.2;        // wsd: cooldown share of the steps
};

struct TrainSection {
  int64_t steps = 300;
  int64_t grad_accum = 1;
  int64_t log_every = 10;
  int64_t bucket_mb = 25;             // data parallel: gradient bucket size (MiB)
  bool overlap_comm = true;           // all-reduce buckets during backward (false: after backward)
  nn::Recompute recompute = nn::Recompute::None;  // activation recomputation (nn/attention_layer.h)
  int64_t loss_chunk = -1;            // rows of logits alive at a time; -1 = automatic, 0 = all
  data::PositionOptions positions;    // the positions training tokens carry (data/positions.h)
};

struct ParallelSection {
  bool shard_optimizer = false;       // ZeRO-1: each data-parallel rank keeps 1/N of the optimizer state
  int64_t context = 1;                // context parallelism: ranks sharing each sequence (zigzag chunks)
  dist::ContextExchange context_exchange = dist::ContextExchange::Ring;  // layers that read the whole sequence
};

struct CheckpointSection {
  int64_t every = 100;                // 0: only at the end
  int64_t keep_last = 3;
  std::string resume = "";            // "" | latest | path to a .h5
  std::string init_from = "";         // weights (not optimizer) of another run: checkpoint or run dir
  bool elastic = false;               // resume under another world size (the data continue at the same global position)
};

// What a run records besides metrics.jsonl and train.log.
struct MetricsSection {
  bool tensorboard = true;            // TensorBoard event files beside metrics.jsonl (io/tensorboard.h)
};

// What `horizon eval` (and the end-of-run evaluation) does: eval::EvalOptions itself, with the
// recipe's defaults; Recipe::eval_options() fills in what comes from the rest of the recipe
// (train_len = data.seq_len, seed, tokenizer, lengths [] = 1x 2x 4x 8x, batch_size 0 = data.batch_size).
eval::EvalOptions recipe_eval_defaults();

struct EvalSection {
  int64_t every = 100;                // periodic validation during training (0: only at the end)
  bool final = true;                  // validation after the last step (false with every 0: none)
  eval::EvalOptions opts = recipe_eval_defaults();
};

struct Recipe {
  std::string source_file;            // where it came from (for messages)
  RunSection run;
  ModelSection model;
  DataSection data;
  OptimSection optim;
  ScheduleSection schedule;
  TrainSection train;
  ParallelSection parallel;
  CheckpointSection checkpoint;
  MetricsSection metrics;
  EvalSection eval;
  DropeSection drope;
  SwanSection swan;

  // Impossible configurations refused before training (names the field and what to change).
  void validate() const;
  // Each layer kind's attention route on a GPU (attention/backend.h) at data.seq_len, in the run's
  // precision, under run.attention_backend: what horizon info and the run log print. RecipeError
  // naming the kind and the ingredient when run.attention_backend is cudnn and cuDNN cannot run it.
  std::vector<std::pair<std::string, attn::LayerRoute>> attention_routes() const;
  // The model config the run starts with (SWAN conversion applied; train_len = data.seq_len).
  nn::ModelConfig model_config() const;
  std::vector<int64_t> eval_lengths() const;
  // What `horizon eval` does with this recipe (eval/ takes no recipe).
  eval::EvalOptions eval_options() const;
  // train.loss_chunk resolved: rows of logits alive at a time in Transformer::loss (0 = all)
  int64_t loss_chunk_rows() const;
};

// What a step above the parser supplies for a recipe whose checkpoint.init_from names another
// framework's model directory (study/hf_models.h reads Hugging Face ones): the model the directory
// describes and its tokenizer. The recipe fills every model field and data.tokenizer it leaves out
// from these: precedence command line > file > the directory > defaults.
struct ModelFill {
  nn::ModelConfig model;
  std::string tokenizer;  // "" when the directory holds none
};
// The JSON files a recipe's number lists name (a layer kind's rope_freq_factors: factors.json,
// eval.longrope_long_factors: LongRoPE's release), read a step above the parser: by field path, the
// file's numbers, or why it could not be read (parse_recipe reports that at the field's line).
struct RecipeFiles {
  std::map<std::string, std::vector<double>> lists;
  std::map<std::string, std::string> errors;
};
// A file a recipe (with its overrides) names: the field, the name as written, and the same name
// beside the recipe (tried when the name does not exist from the working directory; "" for an
// absolute name or one given on the command line).
struct NamedFile {
  std::string field, name, beside_recipe;
};
// Parse a recipe (YAML text; `name` for messages), then apply overrides "a.b.c=value" (value parsed
// as YAML). Pure: reads nothing but the text; checkpoint.init_from is resolved a step above
// (study::resolve_recipe), which hands a ModelFill here, and so are the files named by number lists
// (read_recipe_files: a field naming a file that `files` lacks is refused).
Recipe parse_recipe(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides = {}, const ModelFill* fill = nullptr,
                    const RecipeFiles* files = nullptr);
// The files the recipe's number lists name; reads nothing but the text.
std::vector<NamedFile> named_files(const std::string& yaml_text, const std::string& name,
                                   const std::vector<std::string>& overrides = {});
// Reads them (factors_from_json), for parse_recipe.
RecipeFiles read_recipe_files(const std::string& yaml_text, const std::string& name,
                              const std::vector<std::string>& overrides = {});
// The recipe a run trained with (a checkpoint's, a run directory's config.yaml / eval_recipe.yaml) for
// evaluating, reporting or resuming it: as parse_recipe, without the refusals of settings that would
// train other than they say (a prefix of at least data.seq_len, train.position_max with index
// positions), which a run trained before they were refused still carries.
Recipe parse_trained_recipe(const std::string& yaml_text, const std::string& name,
                            const std::vector<std::string>& overrides = {}, const RecipeFiles* files = nullptr);
Recipe load_trained_recipe(const std::string& path);
// The directory a recipe's model is to be filled from: checkpoint.init_from when it is set and the
// recipe (with its overrides) leaves out some model field or data.tokenizer; "" otherwise. Reads
// nothing but the text.
std::string model_fill_dir(const std::string& yaml_text, const std::string& name,
                           const std::vector<std::string>& overrides = {});
// The text of a recipe file (RecipeError when it cannot be read: missing, not a regular file, or
// larger than kMaxRecipeBytes).
constexpr uint64_t kMaxRecipeBytes = 16u << 20;
std::string read_recipe_file(const std::string& path);
// A list of numbers a recipe field names by a JSON file (rope_freq_factors: factors.json): the file's
// top-level list; for the LongRoPE fields (longrope_long_factors / longrope_short_factors) also an
// object with long_factor / short_factor (LongRoPE's release, or a config.json's rope_scaling /
// rope_parameters). At most 16 MiB and 2^20 values; ValueError naming the file otherwise.
std::vector<double> factors_from_json(const std::string& path, const std::string& field);
// The one YAML document of a recipe or grid file (Null when empty). RecipeError with file:line for a
// syntax error and for a second document (after '---', or anything after '...'), which YAML::Load
// would silently drop.
YAML::Node load_yaml_document(const std::string& text, const std::string& file);
// parse_recipe(read_recipe_file(path), path, overrides) with the files it names: a recipe whose
// model comes from a foreign init_from directory goes through study::load_recipe instead.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});
// The fully resolved recipe (every field, defaults included) as YAML; parse_recipe(to_yaml(r)) == r.
std::string to_yaml(const Recipe& r);
// Every field with its type, default and documentation (for `horizon train --schema`).
std::string recipe_schema();

// Each field of the table has a role (horizon train --schema shows it): architecture (what the
// weights were trained as), inference-time (how a trained model runs: RoPE scalings,
// freeze_scopes, eval.*) or run. A checkpoint's architecture is its own: the architecture fields
// that differ between the recipe it was trained with and `now`, as "path: old -> new".
std::vector<std::string> architecture_changes(const Recipe& trained, const Recipe& now);
// RecipeError naming `what` (the checkpoint), each changed field and the surgery recipes (DroPE,
// SWAN) that change an architecture on purpose; nothing when the architecture is the same.
void check_architecture(const Recipe& trained, const Recipe& now, const std::string& what);

// AttentionSpec <-> the layer-kind fields of a recipe (also used by `horizon info`).
std::string describe_kind(const attn::AttentionSpec& s);

}  // namespace hz::train
