// Horizon: the training loop. One call runs a recipe end to end:
//   recipe -> run dir (config.yaml, metrics.jsonl, train.log, checkpoints/) -> data (prepared
//   shards, deterministic loader) -> model (fresh, init_from, or resumed) -> steps of
//   [grad_accum x (forward, loss / accum, backward)] -> clip -> optimizer step (AdamW, or Muon on
//   hidden matrices + AdamW on the rest) with the schedule -> log / evaluate / checkpoint.
// The run's data lives in train/data.h, the run directory's files in train/run_dir.h; DroPE
// (drope.at_step) and the SWAN stack in train/surgery.h; fault injection is a hook
// (TrainOptions::before_step).
// Same recipe + seed + thread count -> bitwise-identical losses; a resumed run continues the
// uninterrupted trajectory bit for bit.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "nn/transformer.h"
#include "train/recipe.h"

namespace hz::train {

// Another framework's model as the start of a run (TrainOptions::init_weights).
struct ForeignWeights {
  std::map<std::string, Tensor> weights;  // under Horizon parameter names, f32
  nn::ModelConfig config;                 // the model the directory describes (before the recipe's changes)
  std::string config_file;                // where that description is (messages), e.g. DIR/config.json
  std::string summary;                    // for the run log, e.g. "Hugging Face LlamaForCausalLM, 20 tensors"
};

struct TrainOptions {
  bool quiet = false;       // no console progress (the log file is still written)
  int64_t stop_after = -1;  // >= 0: stop (without a final checkpoint) after this many steps: tests of resume
  dist::Communicator* comm = nullptr;  // data parallel ranks (null: a single process)
  int64_t bucket_bytes = 0;            // > 0 overrides train.bucket_mb (tests of bucketing)
  // Called on every rank after each optimizer step (tests: parameters identical across ranks).
  std::function<void(int64_t step_done, nn::Transformer& model)> on_step;
  // Called on every rank before each step (after DroPE): fault injection, interruption tests.
  std::function<void(int64_t step, int rank)> before_step;
  // checkpoint.init_from naming another framework's model directory: its weights for the run's
  // model config (train/ reads only Horizon runs and checkpoints; study::train sets this for
  // Hugging Face directories).
  std::function<ForeignWeights(const nn::ModelConfig& c)> init_weights;
};

// The fault-injection hook of the failure tests, from the environment: HZ_FAULT_RANK and
// HZ_FAULT_STEP make that rank throw at that step, or die from SIGKILL when HZ_FAULT_SIGNAL=1.
// Empty when the variables are not set. `horizon train` installs it.
std::function<void(int64_t step, int rank)> fault_injection_from_env();

struct TrainResult {
  std::string run_dir;
  int64_t start_step = 0, end_step = 0;
  std::vector<double> losses;   // per step of this invocation
  double final_val_loss = 0;    // at the training length (nan if no eval ran)
  int64_t tokens_seen = 0;
  double tokens_per_second = 0;
  double seconds = 0;       // wall time of the steps
  double comm_seconds = 0;  // of which spent launching / waiting for gradient all-reduces
  int64_t mem_peak = 0;     // this rank's allocator high-water mark over the steps (CPU allocator or CUDA pool)
  int64_t mem_plan = 0;     // what the memory plan (train/memory_plan.h) predicted for it
  int64_t eval_mem_peak = 0;  // rank 0's high-water mark inside evaluations (0: none ran)
  int64_t eval_mem_plan = 0;  // the plan's evaluation peak
  int64_t rss_peak = 0;  // CPU: this process's resident peak since the first step, at the last log line
  int64_t rss_plan = 0;  // CPU: the plan's prediction of it (MemoryPlan::process_peak)
};

TrainResult train(const Recipe& r, const TrainOptions& opt = {});

// The model a checkpoint taken after `step` steps holds (DroPE applied when step > drope.at_step).
nn::ModelConfig model_config_at(const Recipe& r, int64_t step);

// The device a rank trains on: the CPU, or (run.device=cuda) the GPU of its local rank. Throws a
// DeviceError saying what to do when CUDA is asked for but not there.
Device train_device(const Recipe& r, const dist::Communicator& comm);
// Dense peak TFLOP/s for the MFU: run.peak_tflops, else the known peak of an H100/H200 for the
// run's precision (989 bf16, 494.7 tf32, 66.9 fp32), else 0 (no MFU).
double peak_tflops(const Recipe& r, Device dev);

}  // namespace hz::train
