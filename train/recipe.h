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

#include "attention/lampe.h"
#include "attention/spec.h"
#include "eval/options.h"
#include "nn/transformer.h"
#include "optim/schedule.h"
#include "train/surgery_options.h"  // DropeSection, SwanSection

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
bool is_synthetic_source(const std::string& s);

struct RunSection {
  std::string name = "run";
  std::string out_dir = "runs";
  int64_t seed = 1234;
  int64_t threads = 0;  // OpenMP threads; 0 = OMP_NUM_THREADS / all cores
  std::string device = "cpu";      // cpu | cuda (under mpirun: the GPU of the local rank)
  std::string precision = "fp32";  // fp32 | bf16 (f32 master weights and optimizer state, bf16 activations/GEMMs)
  bool tf32 = false;               // CUDA: f32 GEMMs on TF32 tensor cores (fp32 runs only)
  double peak_tflops = 0;          // MFU denominator; 0 = known GPU peak (H100/H200: 989 bf16, 495 tf32, 67 fp32), none on CPU
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
  std::string cache_dir = "";         // prepared shards ("" = <out_dir>/_data/<source>-<tokenizer tag>-...)
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
};

struct CheckpointSection {
  int64_t every = 100;                // 0: only at the end
  int64_t keep_last = 3;
  std::string resume = "";            // "" | latest | path to a .h5
  std::string init_from = "";         // weights (not optimizer) of another run: checkpoint or run dir
};

struct EvalSection {
  int64_t every = 100;                // periodic validation during training (0: only at the end)
  int64_t batches = 4;                // validation batches per length
  int64_t batch_size = 0;             // 0 = data.batch_size
  std::vector<int64_t> lengths;       // extrapolation lengths ([] = 1x, 2x, 4x, 8x of data.seq_len)
  // inference-time options (horizon eval)
  std::string rope_scaling = "";      // "" (as trained) | none | pi | ntk | dynamic_ntk | yarn; factor = length / seq_len
  double swan_a = 0;                  // > 0: SWAN row scaling on global NoPE layers
  double drope_c = 0;                 // != 0: temperature beta = 1 + c ln s on every layer
  bool lampe = false;                 // LaMPE on RoPE layers
  double lampe_L = 0;                 // 0 = 3/4 of seq_len
  double lampe_a = 0, lampe_b = 10;   // mapping m = L / (1 + exp(-(a l + b)))
  int64_t lampe_local = 512, lampe_sink = 200;
  std::vector<double> fit_drope_c;    // candidate c values: pick the best per length (reported)
  int64_t passkey_examples = 0;       // > 0: passkey retrieval accuracy per (length, depth)
  std::vector<double> passkey_depths{0.0, 0.25, 0.5, 0.75, 1.0};
  std::vector<double> fit_swan_a;     // candidate SWAN a values: best per length and per 128-token window
  std::vector<std::string> needle_tasks;  // RULER needle tasks scored by greedy decoding ([] = off)
  int64_t needle_samples = 5;         // examples per (task, length, depth)
  std::vector<double> needle_depths{0.0, 0.25, 0.5, 0.75, 1.0};
  std::string needle_format = "ruler";  // ruler | short
  int64_t probe_sequences = 0;        // > 0: linear position probe per layer (R^2 on held-out positions)
};

struct Recipe {
  std::string source_file;            // where it came from (for messages)
  RunSection run;
  ModelSection model;
  DataSection data;
  OptimSection optim;
  ScheduleSection schedule;
  TrainSection train;
  CheckpointSection checkpoint;
  EvalSection eval;
  DropeSection drope;
  SwanSection swan;

  // Impossible configurations refused before training (names the field and what to change).
  void validate() const;
  // The model config the run starts with (SWAN conversion applied; max_seq_len = data.seq_len).
  nn::ModelConfig model_config() const;
  std::vector<int64_t> eval_lengths() const;
  // What `horizon eval` does with this recipe (eval/ takes no recipe).
  eval::EvalOptions eval_options() const;
};

// Parse a recipe file, then apply overrides "a.b.c=value" (value parsed as YAML).
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});
Recipe parse_recipe(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides = {});
// The fully resolved recipe (every field, defaults included) as YAML; parse_recipe(to_yaml(r)) == r.
std::string to_yaml(const Recipe& r);
// Every field with its type, default and documentation (for `horizon train --schema`).
std::string recipe_schema();

// AttentionSpec <-> the layer-kind fields of a recipe (also used by `horizon info`).
std::string describe_kind(const attn::AttentionSpec& s);

}  // namespace hz::train
