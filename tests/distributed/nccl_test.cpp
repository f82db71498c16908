// The NCCL communicator without MPI (hz_test_nccl; built when NCCL is found).
//  - EnvBootstrap: the HZ_* variables and the id file exchange (no GPU needed);
//  - NcclOneRank: a world of one from the environment: CUDA and CPU tensors, broadcast, barrier,
//    all_gather, GradSync with a parameter that has no gradient (skips without a GPU);
//  - NcclOneRank also: send_recv_async to itself;
//  - NcclTwoRanks: point-to-point both ways (blocking and async), and context-parallel attention
//    (ring, all-gather, halo) on the GPU equal to the single-rank CPU op in float64;
//    skips unless HZ_WORLD_SIZE=2; scripts/gpu/nccl_check.sh starts the binary twice
//    (HZ_RANK=0/1, one HZ_NCCL_ID_FILE) with --gtest_filter='NcclTwoRanks.*'.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "autograd/functions.h"
#include "core/device.h"
#include "core/ops.h"
#include "distributed/communicator.h"
#include "distributed/grad_sync.h"
#include "core/rng.h"
#include "distributed/context/route.h"

using namespace hz;

namespace {

// Saves the bootstrap variables and restores them when it goes out of scope.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* n : kNames)
      if (const char* v = std::getenv(n)) saved_[n] = v;
  }
  ~EnvGuard() {
    for (const char* n : kNames) {
      auto it = saved_.find(n);
      if (it == saved_.end()) unsetenv(n);
      else setenv(n, it->second.c_str(), 1);
    }
  }
  static void clear() {
    for (const char* n : kNames) unsetenv(n);
  }

 private:
  static constexpr const char* kNames[] = {"HZ_RANK", "HZ_WORLD_SIZE", "HZ_LOCAL_RANK", "HZ_NCCL_ID_FILE",
                                           "HZ_NCCL_ID_TIMEOUT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                           "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID", "MASTER_ADDR",
                                           "MASTER_PORT"};
  std::map<std::string, std::string> saved_;
};

template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

bool two_rank_launch() {
  const char* s = std::getenv("HZ_WORLD_SIZE");
  return s != nullptr && std::string(s) != "1";
}

// ---- the environment bootstrap (the variables alone, and the id exchange: tests/launch/) ----------

TEST(EnvBootstrap, MakeNcclAndFromEnvironmentCheckTheVariablesFirst) {
  EnvGuard g;
  EnvGuard::clear();
  setenv("HZ_WORLD_SIZE", "2", 1);
  setenv("HZ_RANK", "0", 1);
  // before any GPU is touched: the same message with or without a device
  EXPECT_NE(error_of<ValueError>([] { dist::make_nccl(); }).find("needs a way to share the NCCL unique id"),
            std::string::npos);
  setenv("HZ_NCCL_ID_FILE", "/tmp/unused", 1);
  EXPECT_NE(error_of<Error>([] { dist::from_environment(); }).find("run.device=cuda"), std::string::npos);
  setenv("HZ_WORLD_SIZE", "1", 1);
  EXPECT_EQ(dist::from_environment()->name(), "local");
}

TEST(EnvBootstrap, ReportsTheNcclVersion) {
  ASSERT_TRUE(dist::nccl_compiled());
  const std::string v = dist::nccl_version();
  std::printf("NCCL version (libnccl loaded): %s\n", v.c_str());
  EXPECT_EQ(v.rfind("2.", 0), 0u) << v;
}

// ---- one rank ---------------------------------------------------------------------------------

std::vector<double> values(const Tensor& t) { return t.to_vector(); }

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "no CUDA device (NCCL needs a GPU)";
    if (two_rank_launch()) GTEST_SKIP() << "HZ_WORLD_SIZE is set: a two-rank launch runs NcclTwoRanks.*";
  }
  static dist::Communicator& comm() {
    static std::unique_ptr<dist::Communicator> c = [] {
      EnvGuard g;
      EnvGuard::clear();
      return dist::make_nccl();
    }();
    return *c;
  }
  static Device dev() { return Device::cuda(0); }
};

TEST_F(NcclOneRank, Identity) {
  EXPECT_EQ(comm().name(), "nccl");
  EXPECT_EQ(comm().rank(), 0);
  EXPECT_EQ(comm().size(), 1);
  EXPECT_EQ(comm().local_rank(), 0);
}

TEST_F(NcclOneRank, AllReduceCudaF32AndBf16) {
  std::vector<double> v;
  for (int i = 0; i < 1000; ++i) v.push_back((i % 37) * 0.5 - 4);  // exact in bf16
  for (DType dt : {DType::F32, DType::BF16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}) {
      Tensor t = Tensor::from_vector(v, {10, 100}, dt, dev());
      comm().all_reduce(t, op);
      EXPECT_EQ(values(t), v) << dtype_name(dt);
      Tensor a = Tensor::from_vector(v, {1000}, dt, dev());
      auto req = comm().all_reduce_async(a, op);
      req->wait();
      EXPECT_EQ(values(a), v) << dtype_name(dt);
    }
  }
}

TEST_F(NcclOneRank, CpuTensorsGoThroughTheDevice) {
  Tensor i64 = Tensor::from_vector({0, 1, -5, 1099511627776.0 + 3, -4398046511104.0}, {5}, DType::I64);
  const std::vector<double> want = values(i64);
  comm().all_reduce(i64, ReduceOp::Sum);
  EXPECT_TRUE(i64.device().is_cpu());
  EXPECT_EQ(values(i64), want);
  Tensor i32 = Tensor::from_vector({7, -8, 9}, {3}, DType::I32);
  comm().all_reduce(i32, ReduceOp::Sum);
  EXPECT_EQ(values(i32), (std::vector<double>{7, -8, 9}));
  for (auto op : {ReduceOp::Sum, ReduceOp::Mean}) {
    Tensor f64 = Tensor::from_vector({0.1, 1e300, -2.5}, {3}, DType::F64);
    comm().all_reduce(f64, op);
    EXPECT_EQ(values(f64), (std::vector<double>{0.1, 1e300, -2.5}));
    Tensor f32 = Tensor::from_vector({0.25, 3}, {2}, DType::F32);
    auto req = comm().all_reduce_async(f32, op);
    EXPECT_TRUE(req->test());  // staged: complete on return
    req->wait();
    EXPECT_EQ(values(f32), (std::vector<double>{0.25, 3}));
  }
  EXPECT_DOUBLE_EQ(comm().all_reduce_scalar(2.75, ReduceOp::Mean), 2.75);
  Tensor ints = Tensor::from_vector({1, 2}, {2}, DType::I64);
  EXPECT_THROW(comm().all_reduce(ints, ReduceOp::Mean), DTypeError);
}

// test() on a transfer still queued behind compute: cudaEventQuery's "not ready" must not stay as
// the runtime's last error, or the next kernel launch's check would throw it.
TEST_F(NcclOneRank, AnUnfinishedTransferLeavesNoErrorBehind) {
  const Tensor a = Tensor::full({2048, 2048}, 1.0 / 2048, DType::F32, dev());
  int not_ready = 0;
  for (int round = 0; round < 3; ++round) {
    Tensor busy = a;
    for (int k = 0; k < 8; ++k) busy = ops::matmul(busy, a);  // the all-reduce waits for these
    Tensor t = Tensor::full({1000}, 2.0, DType::F32, dev());
    auto req = comm().all_reduce_async(t, ReduceOp::Sum);
    if (!req->test()) ++not_ready;
    Tensor y;
    EXPECT_NO_THROW(y = ops::add_scalar(a, 1.0));  // a launch, checked
    req->wait();
    EXPECT_EQ(values(t), std::vector<double>(1000, 2.0));
    EXPECT_DOUBLE_EQ(values(y)[0], 1.0 + 1.0 / 2048);
  }
  EXPECT_GT(not_ready, 0) << "every transfer had finished before test(): the case was not exercised";
}

TEST_F(NcclOneRank, SendRecvAsyncToItself) {
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor s = Tensor::from_vector({1, 2, 3}, {3}, dt, dev()), r = Tensor::zeros({3}, dt, dev());
    comm().send_recv_async(s, 0, r, 0)->wait();
    EXPECT_EQ(values(r), (std::vector<double>{1, 2, 3})) << dtype_name(dt);
  }
}

TEST_F(NcclOneRank, BroadcastBarrierAllGather) {
  Tensor c = Tensor::from_vector({1, 2, 3}, {3}, DType::F32, dev());
  comm().broadcast(c, 0);
  EXPECT_EQ(values(c), (std::vector<double>{1, 2, 3}));
  Tensor h = Tensor::from_vector({4, 5}, {2}, DType::I64);
  comm().broadcast(h, 0);
  EXPECT_EQ(values(h), (std::vector<double>{4, 5}));
  EXPECT_THROW(comm().broadcast(c, 1), ValueError);
  comm().barrier();
  EXPECT_EQ(comm().all_gather(42), std::vector<int64_t>{42});
  EXPECT_EQ(comm().all_gather(-(int64_t{1} << 50)), std::vector<int64_t>{-(int64_t{1} << 50)});
}

// A parameter without a gradient on this rank gets a zero gradient on the parameters' device; the
// others keep theirs (average over one rank).
void grad_sync_missing_grad(dist::Communicator& comm, Device dev, bool overlap, int rank_without_grad,
                            double scale_expected) {
  std::vector<ag::Variable> ps;
  for (int i = 0; i < 4; ++i) ps.emplace_back(Tensor::full({50 + i}, 1.0, DType::F32, dev), true);
  dist::GradSync::NamedParams named;
  for (int i = 0; i < 4; ++i) named.emplace_back("p" + std::to_string(i), &ps[i]);
  dist::GradSync gs(comm, named, /*bucket_bytes=*/256, overlap);
  gs.begin();
  const double r = comm.rank() + 1.0;
  ag::Variable acc = ag::sum_all(ag::mul_scalar(ps[0], r));
  for (int i = 1; i < 4; ++i) {
    if (i == 2 && comm.rank() == rank_without_grad) continue;  // p2 unused on this rank
    acc = ag::add(acc, ag::sum_all(ag::mul_scalar(ps[i], r * (i + 1))));
  }
  acc.backward();
  EXPECT_FALSE(ps[2].grad().defined() && comm.rank() == rank_without_grad);
  gs.finish();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ps[i].grad().defined()) << "p" << i;
    EXPECT_EQ(ps[i].grad().device(), dev) << "p" << i << " on " << ps[i].grad().device().str();
    const double want = i == 2 ? scale_expected : (comm.size() == 1 ? r : 1.5) * (i + 1);
    for (double g : values(ps[i].grad())) ASSERT_DOUBLE_EQ(g, want) << "p" << i << " overlap " << overlap;
  }
}

TEST_F(NcclOneRank, GradSyncMissingGradIsZeroOnTheDevice) {
  for (bool overlap : {false, true}) grad_sync_missing_grad(comm(), dev(), overlap, 0, 0.0);
}

// ---- two ranks (scripts/gpu/nccl_check.sh) --------------------------------------------------------

class NcclTwoRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* s = std::getenv("HZ_WORLD_SIZE");
    if (s == nullptr || std::string(s) != "2")
      GTEST_SKIP() << "needs HZ_WORLD_SIZE=2 with HZ_RANK=0/1 and HZ_NCCL_ID_FILE (scripts/gpu/nccl_check.sh)";
    if (!cuda::available()) GTEST_SKIP() << "no CUDA device (NCCL needs a GPU)";
  }
  static dist::Communicator& comm() {
    static std::unique_ptr<dist::Communicator> c = dist::make_nccl();
    return *c;
  }
  static Device dev() { return Device::cuda(comm().local_rank() % cuda::device_count()); }
};

TEST_F(NcclTwoRanks, Identity) {
  EXPECT_EQ(comm().size(), 2);
  EXPECT_EQ(comm().rank(), std::atoi(std::getenv("HZ_RANK")));
  std::printf("rank %d of %d on %s, libnccl %s\n", comm().rank(), comm().size(), dev().str().c_str(),
              dist::nccl_version().c_str());
}

TEST_F(NcclTwoRanks, AllReduce) {
  const int r = comm().rank();
  std::vector<double> v, sum, avg;
  for (int i = 0; i < 3000; ++i) {
    v.push_back((r + 1) * (i % 11));
    sum.push_back(3.0 * (i % 11));
    avg.push_back(1.5 * (i % 11));
  }
  // f32 and bf16 on the device: `in` reduced by `op` (blocking) and by `op_async`
  const auto device_reduce = [&](const std::vector<double>& in, ReduceOp op, const std::vector<double>& want,
                                 ReduceOp op_async, const std::vector<double>& want_async) {
    for (DType dt : {DType::F32, DType::BF16}) {
      Tensor t = Tensor::from_vector(in, {3000}, dt, dev());
      comm().all_reduce(t, op);
      EXPECT_EQ(values(t), want) << dtype_name(dt);
      Tensor a = Tensor::from_vector(in, {3000}, dt, dev());
      comm().all_reduce_async(a, op_async)->wait();
      EXPECT_EQ(values(a), want_async) << dtype_name(dt);
    }
  };
  device_reduce(v, ReduceOp::Sum, sum, ReduceOp::Mean, avg);
  // CPU tensors (staged through the device)
  Tensor i64 = Tensor::from_vector({double(r + 1), double((int64_t{1} << 40) * (r + 1))}, {2}, DType::I64);
  comm().all_reduce(i64, ReduceOp::Sum);
  EXPECT_EQ(values(i64), (std::vector<double>{3, double((int64_t{1} << 40) * 3)}));
  EXPECT_DOUBLE_EQ(comm().all_reduce_scalar(r == 0 ? 1.0 : 2.0, ReduceOp::Mean), 1.5);
  // Max: each element the larger of the two ranks' (which rank holds it alternates), f32 and bf16 on
  // the device, f64 staged from the host (the gradient clip's and the loss guard's reductions)
  std::vector<double> mine, most;
  for (int i = 0; i < 3000; ++i) {
    const double lo = (i % 13) - 6.5, hi = lo + 0.5 + (i % 3);  // exact in bf16
    mine.push_back((i + r) % 2 == 0 ? hi : lo);
    most.push_back(hi);
  }
  device_reduce(mine, ReduceOp::Max, most, ReduceOp::Max, most);
  Tensor f64 = Tensor::from_vector(mine, {3000}, DType::F64);
  comm().all_reduce(f64, ReduceOp::Max);
  EXPECT_EQ(values(f64), most);
  EXPECT_DOUBLE_EQ(comm().all_reduce_scalar(r == 0 ? -3.0 : 7.0, ReduceOp::Max), 7.0);
}

// How many elements differ from `want`. Two-rank tests check with EXPECT, never ASSERT, before
// their last collective: a rank that returned early would leave its peer waiting in the next one.
int64_t count_not(const Tensor& t, double want) {
  int64_t n = 0;
  for (double x : values(t)) n += x != want;
  return n;
}

TEST_F(NcclTwoRanks, BroadcastFromRankOne) {
  const int r = comm().rank();
  Tensor t = Tensor::full({257}, r * 10.0 + 1, DType::F32, dev());
  comm().broadcast(t, 1);
  EXPECT_EQ(count_not(t, 11.0), 0);
  Tensor h = Tensor::full({3}, r * 100.0 + 5, DType::I64);
  comm().broadcast(h, 1);
  EXPECT_EQ(values(h), (std::vector<double>{105, 105, 105}));
}

TEST_F(NcclTwoRanks, AllGatherAndBarrier) {
  const int r = comm().rank();
  EXPECT_EQ(comm().all_gather(r * 7 + 1), (std::vector<int64_t>{1, 8}));
  comm().barrier();
  EXPECT_EQ(comm().all_gather(int64_t{1} << (40 + r)), (std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 41}));
}

TEST_F(NcclTwoRanks, SendRecvBothWays) {
  const int r = comm().rank(), other = 1 - r;
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor s = Tensor::full({1000}, r + 1.0, dt, dev()), got = Tensor::zeros({1000}, dt, dev());
    comm().send_recv(s, other, got, other);
    EXPECT_EQ(count_not(got, other + 1.0), 0) << dtype_name(dt);
    Tensor got2 = Tensor::zeros({1000}, dt, dev());
    comm().send_recv_async(s, other, got2, other)->wait();
    EXPECT_EQ(count_not(got2, other + 1.0), 0) << dtype_name(dt);
    // one way only: rank 0 sends, rank 1 receives
    Tensor got3 = Tensor::zeros({1000}, dt, dev());
    comm().send_recv_async(s, r == 0 ? 1 : -1, got3, r == 1 ? 0 : -1)->wait();
    EXPECT_EQ(count_not(got3, r == 1 ? 1.0 : 0.0), 0) << dtype_name(dt);
  }
}

// the context route over NCCL (f32 on the GPU, reference kernels) against the whole sequence on
// one rank (the CPU op in float64): the ring, the all-gather and the halo, with LogN, a sink and
// FoX's forget gates.
TEST_F(NcclTwoRanks, ContextAttentionOnTheGpuEqualsOneRank) {
  const int64_t B = 2, H = 4, Hkv = 2, D = 16, T = 40;
  for (const bool window : {false, true})
    for (dist::ContextExchange global : {dist::ContextExchange::Ring, dist::ContextExchange::AllGather}) {
      SCOPED_TRACE(std::string(window ? "window 6" : "causal") + ", " + dist::name(global));
      attn::AttnConfig cfg;
      cfg.window = window ? std::vector<int64_t>{6, 6, 6, 6} : std::vector<int64_t>{0, 0, 0, 0};
      cfg.logit = attn::LogitKind::LogN;
      cfg.impl = attn::AttnImpl::Reference;
      dist::ContextRoute route(comm(), T, global);
      Generator g(11);
      const Tensor q = g.normal({B, H, T, D}, 0, 1, DType::F64), k = g.normal({B, Hkv, T, D}, 0, 1, DType::F64),
                   v = g.normal({B, Hkv, T, D}, 0, 1, DType::F64), gout = g.normal({B, H, T, D}, 0, 1, DType::F64);
      const Tensor c0 = Tensor::from_vector({0.7, 0.9, 1.1, 1.3}, {H}, DType::F64), z0 = g.normal({H}, 0, 1, DType::F64),
                   f0 = g.uniform({B, H, T}, -1.0, 0.0, DType::F64);
      ag::Variable qf(q, true), kf(k, true), vf(v, true), cf(c0, true), zf(z0, true), ff(f0, true);
      const ag::Variable of = attn::fused_attention(qf, kf, vf, cfg, {cf, zf, ff}).out;
      of.backward(gout);
      const dist::ZigzagLayout& L = route.layout();
      auto local = [&](const Tensor& t) { return dist::local_rows(t, 2, L).to(DType::F32).to(dev()); };
      ag::Variable ql(local(q), true), kl(local(k), true), vl(local(v), true), cl(c0.to(DType::F32).to(dev()), true),
          zl(z0.to(DType::F32).to(dev()), true), fl(local(f0), true);
      const ag::Variable ol = route.attend(ql, kl, vl, cfg, {cl, zl, fl});
      ol.backward(local(gout));
      auto diff = [](const Tensor& a, const Tensor& b) {
        const std::vector<double> x = a.to(Device::cpu()).to_vector(), y = b.to_vector();
        double m = 0;
        for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
        return m;
      };
      auto rows = [&](const Tensor& t) { return dist::local_rows(t, 2, L); };
      EXPECT_LE(diff(ol.value(), rows(of.value())), 1e-5);
      EXPECT_LE(diff(ql.grad(), rows(qf.grad())), 1e-4);
      EXPECT_LE(diff(kl.grad(), rows(kf.grad())), 1e-4);
      EXPECT_LE(diff(vl.grad(), rows(vf.grad())), 1e-4);
      Tensor dc = cl.grad().clone(), dz = zl.grad().clone();  // each rank holds its rows' share
      comm().all_reduce(dc, ReduceOp::Sum);
      comm().all_reduce(dz, ReduceOp::Sum);
      EXPECT_LE(diff(dc, cf.grad()), 1e-3);
      EXPECT_LE(diff(dz, zf.grad()), 1e-3);
      EXPECT_LE(diff(fl.grad(), rows(ff.grad())), 1e-4);
    }
}

// Context parallelism over NCCL through every exchange with what it carries (tests/distributed/
// context_test.cpp does the same over MPI in f64): the halo with sink tokens, chunks, drawn positions
// (ALiBi and scale-invariant logits read them) and DIFF V2's paired per-head windows; the ring and the
// all-gather for the global layers. f32 through the reference kernels against the f64 CPU op; bf16
// through the tensor-core kernels (the fast path a training run takes) at the bf16 floor: the
// two-rank result no farther from the f64 op than 3x the one-rank GPU op is, plus 2e-3.
TEST_F(NcclTwoRanks, ContextParallelismThroughEveryExchangeEqualsOneRank) {
  using EX = dist::ContextExchange;
  struct Case {
    std::string name;
    std::vector<int64_t> window;
    int64_t chunk = 0, sink_tokens = 0;
    bool alibi = false, drawn = false;
    attn::LogitKind logit = attn::LogitKind::Identity;
  };
  const std::vector<Case> cases = {
      {"causal", {0, 0, 0, 0}},
      {"swa 6", {6, 6, 6, 6}},
      {"swa 6 with 3 sink tokens", {6, 6, 6, 6}, 0, 3},
      {"chunks of 6", {0, 0, 0, 0}, 6},
      {"swa 5, alibi, drawn positions", {5, 5, 5, 5}, 0, 0, true, true},
      {"swa 6, scale-invariant, drawn positions", {6, 6, 6, 6}, 0, 0, false, true, attn::LogitKind::ScaleInvariant},
      {"DIFF V2's paired windows", {4, 4, 7, 7}},
  };
  const int64_t B = 2, H = 4, Hkv = 2, T = 40;
  for (const Case& c : cases)
    for (EX global : {EX::Ring, EX::AllGather})
      for (int64_t D : {int64_t{16}, int64_t{64}}) {  // 16: f32 reference kernels; 64: bf16 tensor-core kernels
        const bool bf16 = D == 64;
        dist::ContextRoute route(comm(), T, global);
        attn::AttnConfig cfg;
        cfg.window = c.window;
        cfg.chunk = c.chunk;
        cfg.sink_tokens = c.sink_tokens;
        cfg.logit = c.logit;
        cfg.tau = 3.0;
        if (c.alibi) cfg.alibi_slope = {0.5, 0.25, 0.125, 0.0625};
        if (c.drawn) {  // increasing real positions with gaps in [0.5, 3)
          Generator pg(7);
          std::vector<double> p = pg.uniform({B, T}, 0.5, 3.0, DType::F64).to_vector();
          for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 1; j < T; ++j) p[b * T + j] += p[b * T + j - 1];
          cfg.positions = Tensor::from_vector(p, {B, T}, DType::F64);
        }
        cfg.impl = bf16 ? attn::AttnImpl::TensorCore : attn::AttnImpl::Reference;
        const EX path = dist::exchange_for(cfg, route.layout(), global, false);
        if (path == EX::Halo && global == EX::AllGather) continue;  // the same run as with the ring
        SCOPED_TRACE(c.name + ", " + dist::name(path) + ", D " + std::to_string(D) + (bf16 ? " bf16" : " f32"));
        const DType dt = bf16 ? DType::BF16 : DType::F32;
        Generator g(13);
        auto in = [&](const Shape& s) { return g.normal(s, 0, 1, DType::F64).to(dt).to(DType::F64); };  // exact in dt
        const Tensor q = in({B, H, T, D}), k = in({B, Hkv, T, D}), v = in({B, Hkv, T, D}), gout = in({B, H, T, D});
        // the f64 op on the CPU, and the one-rank op on the GPU in dt (the floor)
        ag::Variable qf(q, true), kf(k, true), vf(v, true);
        const ag::Variable of = attn::fused_attention(qf, kf, vf, cfg).out;
        of.backward(gout);
        attn::AttnConfig gcfg = cfg;
        if (c.drawn) gcfg.positions = cfg.positions.to(dev());
        ag::Variable q1(q.to(dt).to(dev()), true), k1(k.to(dt).to(dev()), true), v1(v.to(dt).to(dev()), true);
        const ag::Variable o1 = attn::fused_attention(q1, k1, v1, gcfg).out;
        o1.backward(gout.to(dt).to(dev()));
        // this rank's share through the route
        const dist::ZigzagLayout& L = route.layout();
        auto local = [&](const Tensor& t) { return dist::local_rows(t, 2, L).to(dt).to(dev()); };
        ag::Variable ql(local(q), true), kl(local(k), true), vl(local(v), true);
        const ag::Variable ol = route.attend(ql, kl, vl, gcfg, {});
        ol.backward(local(gout));
        auto rows = [&](const Tensor& t) { return dist::local_rows(t.to(Device::cpu()).to(DType::F64), 2, L); };
        auto dist_to = [](const Tensor& a, const Tensor& b) {
          const std::vector<double> x = a.to(Device::cpu()).to(DType::F64).to_vector(), y = b.to_vector();
          double m = 0;
          for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
          return m;
        };
        auto check = [&](const char* what, const Tensor& two, const Tensor& one, const Tensor& ref) {
          const double e2 = dist_to(two, rows(ref)), e1 = dist_to(rows(one), rows(ref));
          EXPECT_LE(e2, bf16 ? 3 * e1 + 2e-3 : 1e-4) << what << " (one rank: " << e1 << ")";
        };
        check("out", ol.value(), o1.value(), of.value());
        check("dq", ql.grad(), q1.grad(), qf.grad());
        check("dk", kl.grad(), k1.grad(), kf.grad());
        check("dv", vl.grad(), v1.grad(), vf.grad());
      }
}

TEST_F(NcclTwoRanks, GradSyncAverages) {
  // rank r's gradient is (r + 1) x; p2 is used by rank 1 only (gradient 2 * 3 there): average 3
  for (bool overlap : {false, true}) grad_sync_missing_grad(comm(), dev(), overlap, 0, 3.0);
}

}  // namespace
