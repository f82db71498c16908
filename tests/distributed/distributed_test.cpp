// Data parallelism, run by CTest under `mpirun -np 2`: 2 ranks with per-rank batch B follow the
// 1-rank batch-2B trajectory, parameters stay identical across ranks, resume is exact, and the
// bucket layout / overlap switch do not change a single bit; packed documents with recomputation
// follow the 1-rank trajectory too.
#include <gtest/gtest.h>

#include "core/hash.h"
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "distributed/grad_sync.h"
#include "tests/distributed/dist_test_util.h"

using namespace hz;
using namespace hz::train;
using namespace hz::train::test;

namespace {

class TwoRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world().size() != 2) GTEST_SKIP() << "needs exactly 2 ranks (run under mpirun -np 2), got " << world().size();
  }
};

}  // namespace

TEST_F(TwoRanks, AllReduceSumsAveragesAndTakesTheMaximum) {
  // rank r holds (r + 1) x (1, -2, 3): sum 3 x, mean 1.5 x, max elementwise over the two ranks
  const double f = world().rank() + 1.0;
  const std::vector<double> sum{3, -6, 9}, mean{1.5, -3, 4.5}, max{2, -2, 6};
  for (const auto& [op, want] : {std::pair{ReduceOp::Sum, sum}, {ReduceOp::Mean, mean}, {ReduceOp::Max, max}}) {
    Tensor t = Tensor::from_vector({f, -2 * f, 3 * f}, {3}, DType::F64);
    world().all_reduce(t, op);
    EXPECT_EQ(t.to_vector(), want);
    Tensor a = Tensor::from_vector({f, -2 * f, 3 * f}, {3}, DType::F64);
    world().all_reduce_async(a, op)->wait();
    EXPECT_EQ(a.to_vector(), want);
  }
}

TEST_F(TwoRanks, MatchOneRankWithDoubleBatchAndStayIdentical) {
  TrainOptions o = on(&world());
  int64_t checks = 0;
  o.on_step = [&](int64_t step, nn::Transformer& m) {
    const auto sums = world().all_gather(static_cast<int64_t>(checksum(m)));
    EXPECT_EQ(sums[0], sums[1]) << "parameters differ across ranks after step " << step;
    ++checks;
  };
  const TrainResult two = hz::train::train(tiny("dp2", 4), o);
  EXPECT_EQ(checks, 20);
  ASSERT_EQ(two.losses.size(), 20u);
  if (world().rank() == 0) {
    const TrainResult one = hz::train::train(tiny("dp1", 8), on(nullptr));
    ASSERT_EQ(one.losses.size(), 20u);
    for (size_t i = 0; i < 20; ++i)
      EXPECT_NEAR(two.losses[i], one.losses[i], 2e-5 * std::max(1.0, std::abs(one.losses[i]))) << "step " << i + 1;
    EXPECT_LT(one.losses.back(), one.losses.front());
  }
  world().barrier();
}

// Packed documents (masked, position reset) with layer recomputation: 2 ranks of batch B follow
// the 1-rank batch-2B trajectory and keep identical parameters.
TEST_F(TwoRanks, PackedDocumentsAndRecomputationMatchOneRank) {
  const std::string corpus = root() + "/short_docs.jsonl";
  if (world().rank() == 0) {
    std::filesystem::create_directories(root());
    std::ofstream f(corpus);
    for (int d = 0; d < 400; ++d) {
      f << "{\"text\": \"";
      for (int w = 0; w < 1 + (d * 7) % 9; ++w) f << (w ? " " : "") << "word" << (d * 13 + w * 5) % 17;
      f << "\"}\n";
    }
  }
  world().barrier();
  const std::vector<std::string> extra{"data.source=jsonl", "data.files=[" + corpus + "]",
                                       "data.cache_dir=" + root() + "/short_docs", "data.documents=masked",
                                       "data.position_reset=true", "train.recompute=layer", "checkpoint.every=0"};
  TrainOptions o = on(&world());
  o.on_step = [&](int64_t step, nn::Transformer& m) {
    const auto sums = world().all_gather(static_cast<int64_t>(checksum(m)));
    EXPECT_EQ(sums[0], sums[1]) << "parameters differ across ranks after step " << step;
  };
  const TrainResult two = hz::train::train(tiny("dp2_docs", 4, extra), o);
  ASSERT_EQ(two.losses.size(), 20u);
  if (world().rank() == 0) {
    const TrainResult one = hz::train::train(tiny("dp1_docs", 8, extra), on(nullptr));
    for (size_t i = 0; i < 20; ++i)
      EXPECT_NEAR(two.losses[i], one.losses[i], 2e-5 * std::max(1.0, std::abs(one.losses[i]))) << "step " << i + 1;
  }
  world().barrier();
}

TEST_F(TwoRanks, ResumeContinuesTheSameTrajectory) {
  const TrainResult full = hz::train::train(tiny("dp_full", 4, {"train.steps=12"}), on(&world()));
  TrainOptions stop = on(&world());
  stop.stop_after = 6;
  const TrainResult a = hz::train::train(tiny("dp_split", 4, {"train.steps=12"}), stop);
  const TrainResult b = hz::train::train(tiny("dp_split", 4, {"train.steps=12", "checkpoint.resume=latest"}), on(&world()));
  ASSERT_EQ(b.start_step, 6);
  ASSERT_EQ(b.losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(b.losses[i], full.losses[6 + i]) << "step " << 7 + i;  // bitwise
  // a different world size may not resume this run
  if (world().rank() == 0) {
    try {
      hz::train::train(tiny("dp_split", 4, {"train.steps=14", "checkpoint.resume=latest"}), on(nullptr));
      ADD_FAILURE() << "a 2-rank checkpoint was resumed by 1 rank";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("mpirun -np 2"), std::string::npos) << e.what();
    }
  }
  world().barrier();
}

TEST_F(TwoRanks, BucketsAndOverlapDoNotChangeGradients) {
  auto run = [&](const std::string& name, int64_t bucket_bytes, bool overlap) {
    TrainOptions o = on(&world());
    o.bucket_bytes = bucket_bytes;
    uint64_t last = 0;
    o.on_step = [&](int64_t, nn::Transformer& m) { last = checksum(m); };
    const TrainResult r = hz::train::train(
        tiny(name, 4, {"train.steps=6", "checkpoint.every=0", std::string("train.overlap_comm=") + (overlap ? "true" : "false")}), o);
    return std::make_pair(r.losses, last);
  };
  const auto one_bucket = run("b_one", 64 << 20, true);
  const auto many = run("b_many", 1024, true);  // every parameter its own small bucket
  const auto after = run("b_after", 4096, false);
  EXPECT_EQ(one_bucket.first, many.first);
  EXPECT_EQ(one_bucket.second, many.second);
  EXPECT_EQ(one_bucket.first, after.first);
  EXPECT_EQ(one_bucket.second, after.second);
}

TEST_F(TwoRanks, GradSyncAveragesAndOverlapsDuringBackward) {
  // rank r's gradient is (r + 1) * x: the average over 2 ranks is 1.5 x, in every bucket layout
  std::vector<ag::Variable> ps;
  for (int i = 0; i < 5; ++i) ps.emplace_back(Tensor::full({100 + i}, 1.0), true);
  dist::GradSync::NamedParams named;
  for (int i = 0; i < 5; ++i) named.emplace_back("p" + std::to_string(i), &ps[i]);
  dist::GradSync gs(world(), named, /*bucket_bytes=*/400, /*overlap=*/true);
  EXPECT_GE(gs.num_buckets(), 5);
  gs.begin();
  ag::Variable loss = ps[0];
  ag::Variable acc = ag::sum_all(ag::mul_scalar(ps[0], world().rank() + 1.0));
  for (int i = 1; i < 5; ++i) acc = ag::add(acc, ag::sum_all(ag::mul_scalar(ps[i], (world().rank() + 1.0) * (i + 1))));
  acc.backward();
  EXPECT_GT(gs.overlapped_buckets(), 0);  // launched from grad-ready hooks, before finish()
  gs.finish();
  for (int i = 0; i < 5; ++i)
    for (double g : ps[i].grad().to_vector()) EXPECT_DOUBLE_EQ(g, 1.5 * (i + 1));
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dist::Communicator& w = world();
  if (w.rank() != 0) {  // one rank reports; every rank still asserts and sets the exit code
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  const auto all = w.all_gather(rc);
  if (w.rank() == 0) std::filesystem::remove_all(root());
  int worst = 0;
  for (auto x : all) worst = std::max<int>(worst, static_cast<int>(x));
  return worst;
}
