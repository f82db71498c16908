// ZeRO-1 (parallel.shard_optimizer), run by CTest under mpirun -np 2 and -np 4:
//   - the plan: every element of every parameter has exactly one owner, Muon's matrices whole,
//     AdamW's shares equal to within one element;
//   - the communicators' all-gather;
//   - 20 steps of AdamW and of Muon (and bf16 compute) sharded equal the replicated optimizer on
//     the same ranks bitwise, losses and parameters, each rank holding about 1/N of the state;
//   - resume is exact, and the checkpoint's optimizer state is bitwise the replicated run's;
//   - a checkpoint of a sharded run resumes (checkpoint.elastic) under 1 rank and, through
//     HZ_ZERO_SHARED (the 2-rank run writes, the 4-rank run reads), under 4 ranks, following the
//     writer's trajectory at the same global batch to f32 round-off.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "distributed/zero.h"
#include "tests/distributed/dist_test_util.h"
#include "train/checkpoint.h"

using namespace hz;
using namespace hz::train;
using namespace hz::train::test;

namespace {

class Zero : public MultiRankTest {};

// A run of the tiny recipe on every rank of the world: its losses and the parameter checksum after
// every step (equal on every rank, checked).
struct RunTrace {
  std::vector<double> losses;
  std::vector<uint64_t> sums;
};
RunTrace train_on_world(const std::string& name, std::vector<std::string> extra) {
  TrainOptions o = on(&world());
  RunTrace r;
  o.on_step = [&](int64_t step, nn::Transformer& m) {
    const auto all = world().all_gather(static_cast<int64_t>(checksum(m)));
    for (size_t q = 1; q < all.size(); ++q) EXPECT_EQ(all[q], all[0]) << "rank " << q << " differs after step " << step;
    r.sums.push_back(checksum(m));
  };
  extra.push_back("data.batch_size=" + std::to_string(8 / world().size()));
  r.losses = hz::train::train(tiny(name, 8 / world().size(), extra), o).losses;
  return r;
}

std::string world_tag() { return "w" + std::to_string(world().size()); }

}  // namespace

TEST(ZeroPlan, EveryElementHasOneOwnerMuonMatricesStayWhole) {
  std::vector<ag::Variable> vs;
  const std::vector<Shape> shapes{{7, 5}, {3}, {11, 4}, {1}, {6, 6}, {2, 9}, {13}};
  for (const auto& s : shapes) vs.emplace_back(Tensor::zeros(s), true);
  optim::OptimizerSpec muon, adamw;
  muon.kind = optim::OptimizerSpec::Kind::Muon;
  muon.groups = {{"hidden", {{"a", &vs[0]}, {"c", &vs[2]}, {"e", &vs[4]}, {"f", &vs[5]}}, 0.1, 0.0}};
  adamw.groups = {{"decay", {{"b", &vs[1]}, {"g", &vs[6]}}, 0.1, 0.1}, {"no_decay", {{"d", &vs[3]}}, 0.1, 0.0}};
  const std::vector<optim::OptimizerSpec> specs{muon, adamw};
  for (int world = 1; world <= 6; ++world) {
    dist::ZeroPlan plan(specs, world);
    std::map<std::pair<size_t, size_t>, std::vector<int>> owner;  // (part, param) -> owner of each element
    for (size_t part = 0; part < 2; ++part) {
      size_t k = 0;
      for (const auto& g : specs[part].groups)
        for (const auto& p : g.params) owner[{part, k++}].assign(p.second->value().numel(), -1);
    }
    int64_t adam_min = INT64_MAX, adam_max = 0;
    for (int r = 0; r < world; ++r) {
      int64_t adam = 0;
      for (const dist::ZeroPiece& p : plan.pieces(r)) {
        auto& o = owner.at({p.part, p.param});
        ASSERT_TRUE(p.lo >= 0 && p.lo < p.hi && p.hi <= static_cast<int64_t>(o.size()));
        if (p.part == 0) EXPECT_EQ(p.numel(), static_cast<int64_t>(o.size())) << "a Muon matrix was cut";
        else adam += p.numel();
        for (int64_t i = p.lo; i < p.hi; ++i) {
          EXPECT_EQ(o[i], -1) << "element owned twice";
          o[i] = r;
        }
      }
      adam_min = std::min(adam_min, adam), adam_max = std::max(adam_max, adam);
    }
    for (const auto& [k, o] : owner)
      for (int x : o) EXPECT_GE(x, 0) << "an element without owner at world " << world;
    EXPECT_LE(adam_max - adam_min, (17 + world - 1) / world) << "AdamW shares unequal at world " << world;
    EXPECT_EQ(plan.total(), 35 + 3 + 44 + 1 + 36 + 18 + 13);
  }
}

TEST_F(Zero, AllGatherCollectsEveryRankInOrder) {
  const int n = world().size(), me = world().rank();
  for (DType dt : {DType::F32, DType::F64, DType::I64}) {
    Tensor in = Tensor::from_vector({me * 10.0, me * 10.0 + 1, me * 10.0 + 2}, {3}, dt);
    Tensor out = Tensor::empty({3 * n}, dt);
    world().all_gather_into(in, out);
    const std::vector<double> v = out.to_vector();
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 3; ++i) EXPECT_EQ(v[q * 3 + i], q * 10.0 + i);
  }
  Tensor in = Tensor::zeros({3}), wrong = Tensor::empty({3 * n + 1});
  EXPECT_THROW(world().all_gather_into(in, wrong), ValueError);
}

TEST_F(Zero, ShardedStepsEqualTheReplicatedOptimizerBitwise) {
  for (const std::string opt : {"adamw", "muon"})
    for (const std::string prec : {"fp32", "bf16"}) {
      if (opt == "adamw" && prec == "bf16") continue;
      const std::vector<std::string> common{"optim.name=" + opt, "run.precision=" + prec, "checkpoint.every=0",
                                            "optim.grad_clip=1.0"};
      std::vector<std::string> sharded = common;
      sharded.push_back("parallel.shard_optimizer=true");
      const RunTrace rep = train_on_world("zrep_" + opt + prec + world_tag(), common);
      const RunTrace z = train_on_world("zsh_" + opt + prec + world_tag(), sharded);
      ASSERT_EQ(z.losses.size(), 20u);
      EXPECT_EQ(z.losses, rep.losses) << opt << " " << prec;
      EXPECT_EQ(z.sums, rep.sums) << opt << " " << prec << ": parameters differ from the replicated optimizer's";
      EXPECT_LT(z.losses.back(), z.losses.front());
    }
}

TEST_F(Zero, EachRankHoldsItsShareOfTheState) {
  nn::ModelConfig c = tiny("zshare", 4).model_config();
  nn::Transformer m(c, 1);
  optim::OptimizerSpec adamw;
  adamw.groups = {{"all", m.named_parameters(), 1e-3, 0.0}};
  dist::ZeroOptimizer z(world(), {adamw});
  const int64_t whole = 2 * m.num_parameters();
  EXPECT_EQ(z.state_bytes(-1), whole * 4);
  const auto shares = world().all_gather(z.state_numel());
  for (int64_t s : shares) EXPECT_LE(s, 2 * ((m.num_parameters() + world().size() - 1) / world().size()));
}

TEST_F(Zero, ResumeIsExactAndCheckpointsHoldTheReplicatedState) {
  for (const std::string opt : {"adamw", "muon"}) {
    const std::vector<std::string> base{"optim.name=" + opt, "train.steps=12"};
    std::vector<std::string> sh = base;
    sh.push_back("parallel.shard_optimizer=true");
    const std::string tag = opt + world_tag();
    const RunTrace full = train_on_world("zfull_" + tag, sh);
    const RunTrace rep = train_on_world("zrepck_" + tag, base);
    TrainOptions stop = on(&world());
    stop.stop_after = 6;
    auto split = sh;
    split.push_back("data.batch_size=" + std::to_string(8 / world().size()));
    hz::train::train(tiny("zsplit_" + tag, 8 / world().size(), split), stop);
    auto resume = sh;
    resume.push_back("checkpoint.resume=latest");
    const RunTrace b = train_on_world("zsplit_" + tag, resume);
    ASSERT_EQ(b.losses.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(b.losses[i], full.losses[6 + i]) << opt << " step " << 7 + i;  // bitwise
    EXPECT_EQ(b.sums.back(), full.sums.back());
    if (world().rank() == 0) {  // the sharded run's checkpoint holds the replicated run's optimizer state, bit for bit
      const CheckpointData a = load_checkpoint(find_latest_checkpoint(root() + "/zfull_" + tag + "/checkpoints"));
      const CheckpointData r = load_checkpoint(find_latest_checkpoint(root() + "/zrepck_" + tag + "/checkpoints"));
      ASSERT_EQ(a.optimizer.size(), r.optimizer.size());
      for (const auto& [k, v] : r.optimizer) {
        ASSERT_TRUE(a.optimizer.count(k)) << k;
        EXPECT_EQ(a.optimizer.at(k).shape(), v.shape()) << k;
        EXPECT_EQ(a.optimizer.at(k).to_vector(), v.to_vector()) << k;
      }
    }
    world().barrier();
  }
}

// A sharded run's step-6 checkpoint resumed under another world size (checkpoint.elastic) at the
// same global batch (8 sequences) follows the writer's steps 7-12 to f32 round-off.
TEST_F(Zero, ElasticResumeUnderAnotherWorldSize) {
  const std::string tag = world_tag();
  const std::vector<std::string> sh{"optim.name=muon", "train.steps=12", "parallel.shard_optimizer=true"};
  const RunTrace full = train_on_world("zel_" + tag, sh);
  const std::string ck = root() + "/zel_" + tag + "/checkpoints";
  const std::string six = ck + "/step_6.h5";
  ASSERT_TRUE(std::filesystem::exists(six)) << "no step-6 checkpoint in " << ck;
  auto near = [&](const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
    ASSERT_EQ(got.size(), 6u) << what;
    for (size_t i = 0; i < 6; ++i)
      EXPECT_NEAR(got[i], want[6 + i], 2e-5 * std::max(1.0, std::abs(want[6 + i]))) << what << " step " << 7 + i;
  };
  if (world().rank() == 0) {  // under 1 rank, batch 8
    const TrainResult one = hz::train::train(
        tiny("zel1_" + tag, 8, {"optim.name=muon", "train.steps=12", "checkpoint.elastic=true", "checkpoint.resume=" + six}),
        on(nullptr));
    near(one.losses, full.losses, "1 rank from " + tag);
    try {  // without checkpoint.elastic the world size must match
      hz::train::train(tiny("zel1b_" + tag, 8, {"optim.name=muon", "train.steps=12", "checkpoint.resume=" + six}), on(nullptr));
      ADD_FAILURE() << "resumed under another world size without checkpoint.elastic";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("checkpoint.elastic"), std::string::npos) << e.what();
    }
  }
  world().barrier();
  // across the two mpirun runs of the suite: the 2-rank run leaves its checkpoint and losses, the
  // 4-rank run resumes them
  const char* shared = std::getenv("HZ_ZERO_SHARED");
  if (!shared) return;
  const std::string dir = std::string(shared) + "/from_w2";
  if (world().size() == 2) {
    if (world().rank() == 0) {
      std::filesystem::create_directories(dir);
      std::filesystem::copy_file(six, dir + "/step6.h5", std::filesystem::copy_options::overwrite_existing);
      std::ofstream f(dir + "/losses.txt");
      f.precision(17);
      for (double l : full.losses) f << l << "\n";
    }
  } else if (world().size() == 4) {
    ASSERT_TRUE(std::filesystem::exists(dir + "/step6.h5")) << "the 2-rank run's checkpoint is missing from " << dir;
    std::vector<double> want;
    std::ifstream f(dir + "/losses.txt");
    for (double l; f >> l;) want.push_back(l);
    ASSERT_EQ(want.size(), 12u);
    const RunTrace four = train_on_world("zel4_from2", {"optim.name=muon", "train.steps=12", "parallel.shard_optimizer=true",
                                                   "checkpoint.elastic=true", "checkpoint.resume=" + dir + "/step6.h5"});
    near(four.losses, want, "4 ranks from 2");
  }
  world().barrier();
}
