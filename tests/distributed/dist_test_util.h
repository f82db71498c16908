// Helpers of the data-parallel suite (hz_test_distributed, run by CTest under mpirun): the world,
// a directory every rank shares, a tiny recipe, a parameter checksum.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "core/hash.h"
#include "distributed/communicator.h"
#include "tests/train/train_test_util.h"
#include "train/trainer.h"

namespace hz::train::test {

inline dist::Communicator& world() {
  static std::unique_ptr<dist::Communicator> c = dist::from_environment();
  return *c;
}

// The fixture of the suites that need several ranks: skipped in a world of one.
class MultiRankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world().size() < 2) GTEST_SKIP() << "needs 2 or more ranks (mpirun -np 2 / 4)";
  }
};

inline std::string root() {
  // the same path on every rank: they share mpirun as parent
  static const std::string r = "/tmp/hz_dist_test_" + std::to_string(getppid());
  return r;
}

// tests/train/train_test_util.h's small run, smaller (d 32, 2 heads, 32 tokens, 20 steps at lr 5e-3)
inline Recipe tiny(const std::string& name, int64_t batch, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"model.d_model=32", "model.n_heads=2", "data.seq_len=32",
                               "data.batch_size=" + std::to_string(batch), "train.steps=20", "train.log_every=10",
                               "optim.lr=5e-3", "eval.batches=1", "eval.lengths=[32]"});
  return hz::test::tiny_recipe(root(), name, extra);
}

inline uint64_t checksum(nn::Transformer& m) {
  uint64_t h = kFnvOffset;
  for (auto& [n, v] : m.named_parameters()) {
    const std::vector<double> x = v->value().to_vector();
    h = fnv1a64(x.data(), x.size() * sizeof(double), h);
  }
  return h;
}

inline TrainOptions on(dist::Communicator* c) {
  TrainOptions o;
  o.quiet = true;
  o.comm = c;
  return o;
}

}  // namespace hz::train::test
