#include "train/run_dir.h"

#include <filesystem>

namespace fs = std::filesystem;

namespace hz::train {

RunDir::RunDir(const Recipe& r, bool lead, bool quiet, bool resuming)
    : dir_(r.run.out_dir + "/" + r.run.name), lead_(lead), quiet_(quiet) {
  if (!lead_) return;
  fs::create_directories(checkpoint_dir());
  const auto mode = resuming ? std::ios::app : std::ios::trunc;
  log_.open(dir_ + "/train.log", mode);
  metrics_.open(dir_ + "/metrics.jsonl", mode);
  std::ofstream cfg(dir_ + "/config.yaml");
  cfg << to_yaml(r);
  HZ_CHECK(log_.good() && metrics_.good() && cfg.good(), ValueError, "cannot write into the run directory '", dir_,
           "'; check run.out_dir and its permissions");
}

void RunDir::metrics(const std::string& line) {
  if (!lead_) return;
  metrics_ << line << "\n";
  metrics_.flush();
}

void RunDir::save(int64_t step, const CheckpointData& c, int64_t keep_last) {
  if (!lead_) return;
  save_checkpoint(checkpoint_path(checkpoint_dir(), step), c);
  prune_checkpoints(checkpoint_dir(), static_cast<int>(keep_last));
}

}  // namespace hz::train
