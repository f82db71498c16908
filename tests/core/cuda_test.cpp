// Horizon core tests: the CUDA runtime (transfers, the pool allocator and its statistics, random
// fills, errors, non-contiguous views) against the CPU; every op is also compared case by case in
// ops_test.cpp. Skipped when no CUDA device is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tests/core/test_util.h"

namespace {

using hz::BinaryOp;
using hz::Device;
using hz::DType;
using hz::Shape;
using hz::Tensor;

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hz::cuda::available()) {
      GTEST_SKIP() << "no CUDA device: " << (hz::cuda::compiled() ? "CUDA build, but no visible GPU/driver"
                                                                   : "this build has HZ_CUDA=OFF");
    }
  }
};

TEST(CudaAvailability, ConsistentAnswers) {
  // available() implies compiled() and at least one device; never throws
  EXPECT_NO_THROW(hz::cuda::device_count());
  if (hz::cuda::available()) {
    EXPECT_TRUE(hz::cuda::compiled());
    EXPECT_GT(hz::cuda::device_count(), 0);
  } else {
    EXPECT_THROW(Tensor::zeros({2}, DType::F32, Device::cuda()), hz::DeviceError);
  }
}

TEST_F(CudaTest, HostDeviceRoundTrip) {
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::BF16}) {
    SCOPED_TRACE(hz::dtype_name(dt));
    const std::vector<double> v = hzt::rand_values(1000 * 3, 1, -100.0, 100.0, dt);
    Tensor h = hzt::make_tensor(v, {1000, 3}, dt);
    Tensor d = h.to(Device::cuda());
    EXPECT_TRUE(d.device().is_cuda());
    EXPECT_EQ(d.dtype(), dt);
    EXPECT_EQ(d.shape(), h.shape());
    EXPECT_EQ(d.to(Device::cuda()).storage().get(), d.storage().get());  // already there
    Tensor back = d.to(Device::cpu());
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_TRUE(hzt::all_equal(back, v));
    // element access and to_vector() read through the device
    EXPECT_EQ(d.at({999, 2}), v.back());
    EXPECT_TRUE(hzt::all_equal(d, v));
    // device -> device copies
    Tensor d2 = d.clone();
    EXPECT_NE(d2.storage().get(), d.storage().get());
    EXPECT_TRUE(d2.device().is_cuda());
    EXPECT_TRUE(hzt::all_equal(d2, v));
  }
  // a non-contiguous host view is uploaded in logical order
  const std::vector<double> v = hzt::rand_values(17 * 65, 2, -1.0, 1.0, DType::F32);
  Tensor t = hzt::make_tensor(v, {17, 65}, DType::F32, hzt::Layout::Transposed);
  EXPECT_TRUE(hzt::all_equal(t.to(Device::cuda()).to(Device::cpu()), v));
  // creation on the device
  EXPECT_TRUE(hzt::all_equal(Tensor::full({3, 5}, 2.5, DType::F32, Device::cuda()), std::vector<double>(15, 2.5)));
  EXPECT_TRUE(hzt::all_equal(Tensor::from_vector(v, {17, 65}, DType::F32, Device::cuda()), v));
}

TEST_F(CudaTest, DevicesMustMatchAndNaNPropagatesLikeTheCpu) {
  Tensor d = Tensor::ones({2, 3}, DType::F32, Device::cuda());
  EXPECT_THROW(hz::ops::add(d, Tensor::ones({2, 3})), hz::DeviceError);  // cuda + cpu
  const double nan = std::nan("");
  for (BinaryOp op : {BinaryOp::Maximum, BinaryOp::Minimum}) {
    Tensor a = Tensor::from_vector({nan, 1.0, 2.0, nan}, {4}), b = Tensor::from_vector({1.0, nan, 1.0, nan}, {4});
    const std::vector<double> cpu = hz::ops::binary(op, a, b).to_vector();
    const std::vector<double> gpu = hz::ops::binary(op, a.to(Device::cuda()), b.to(Device::cuda())).to_vector();
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(std::isnan(cpu[i]), std::isnan(gpu[i])) << i;
    EXPECT_TRUE(std::isnan(gpu[0]) && std::isnan(gpu[1]));  // a NaN on either side wins
  }
}

TEST_F(CudaTest, RandomFillsGiveTheCpuNumbers) {
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(hz::dtype_name(dt));
    hz::Generator gc(7, 3), gd(7, 3);
    gc.set_offset(12);
    gd.set_offset(12);
    const Tensor c = gc.normal({1000, 3}, 0.5, 2.0, dt), d = gd.normal({1000, 3}, 0.5, 2.0, dt, Device::cuda());
    EXPECT_EQ(gc.offset(), gd.offset());
    const std::vector<double> cv = c.to_vector(), dv = d.to_vector();
    // the same Philox words; Box-Muller in double on both sides (the device's log/cos may differ in
    // the last double bit, which survives rounding to f32 essentially never)
    int differ = 0;
    for (size_t i = 0; i < cv.size(); ++i) differ += cv[i] != dv[i];
    EXPECT_LE(differ, dt == DType::F64 ? 3000 : 2) << "elements differing from the CPU fill";
    if (dt == DType::F64) {
      EXPECT_TRUE(hzt::all_close(d, cv, 1e-14, 1e-14));
    }
    const Tensor u = gc.uniform({777}, -1.0, 3.0, dt), ud = gd.uniform({777}, -1.0, 3.0, dt, Device::cuda());
    EXPECT_TRUE(hzt::all_equal(ud, u.to_vector()));  // no transcendental functions: bitwise
  }
}

TEST_F(CudaTest, PoolServesSteadyStateWithoutNewDeviceAllocations) {
  const Device dev = Device::cuda();
  auto step = [&] {  // allocate and free the same sizes, as a training step does
    Tensor a = Tensor::ones({1024, 1024}, DType::F32, dev);
    Tensor b = hz::ops::matmul(a, a);
    Tensor c = hz::ops::unary(hz::UnaryOp::Exp, hz::ops::mul_scalar(b, 1e-4));
    return hz::ops::sum_all(c).item();
  };
  step();
  step();
  const hz::DeviceMemoryStats before = hz::memory_stats(dev);
  for (int i = 0; i < 5; ++i) step();
  const hz::DeviceMemoryStats after = hz::memory_stats(dev);
  EXPECT_EQ(after.device_allocs, before.device_allocs) << "the pool grew in steady state";
  EXPECT_GE(after.reserved, after.allocated);
  EXPECT_GE(after.peak, 3 * 1024 * 1024 * 4);  // a, b, c were live together
  Tensor big = Tensor::empty({64, 1024, 1024}, DType::F32, dev);  // 256 MiB: the pool must grow
  EXPECT_GT(hz::memory_stats(dev).allocated, after.allocated);
}

TEST_F(CudaTest, ErrorsNameTheCallAndWhatToDo) {
  try {
    Tensor::empty({int64_t{1} << 40}, DType::F32, Device::cuda());  // 4 TiB
    FAIL() << "expected out of memory";
  } catch (const hz::DeviceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cudaMallocAsync"), std::string::npos) << m;
    EXPECT_NE(m.find("batch_size"), std::string::npos) << m;  // the hint
  }
  // the device still works afterwards
  EXPECT_TRUE(hzt::all_equal(Tensor::full({3}, 2.0, DType::F32, Device::cuda()), {2, 2, 2}));
}

TEST_F(CudaTest, MatmulMatchesCpu) {
  struct Case {
    Shape a, b;
    bool ta, tb;
    double alpha;
    DType dt;
  };
  const Case cases[] = {
      {{17, 33}, {33, 9}, false, false, 1.0, DType::F32},
      {{33, 17}, {33, 9}, true, false, 1.0, DType::F32},
      {{17, 33}, {9, 33}, false, true, -0.5, DType::F32},
      {{33, 17}, {9, 33}, true, true, 2.0, DType::F64},
      {{300, 257}, {257, 65}, false, false, 1.0, DType::F32},
      {{4, 3, 17}, {4, 17, 5}, false, false, 1.0, DType::F32},
      {{2, 3, 5, 4}, {2, 3, 6, 4}, false, true, 1.0, DType::F64},
      {{1, 1}, {1, 1}, false, false, 1.0, DType::F32},
      {{6, 1}, {1, 4}, false, false, 1.0, DType::F32},
      {{64, 128}, {128, 96}, false, true, 1.0, DType::BF16},
      {{3, 65, 130}, {3, 65, 33}, true, false, 0.5, DType::BF16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(hz::shape_str(c.a) + " x " + hz::shape_str(c.b));
    const std::vector<double> av = hzt::rand_values(hzt::numel_of(c.a), 5, -1.0, 1.0, c.dt);
    const std::vector<double> bv = hzt::rand_values(hzt::numel_of(c.b), 6, -1.0, 1.0, c.dt);
    Shape os;
    std::vector<double> mag;
    const std::vector<double> want = hzt::ref_matmul(av, c.a, bv, c.b, c.ta, c.tb, c.alpha, &os, &mag);
    Tensor a = hzt::make_tensor(av, c.a, c.dt), b = hzt::make_tensor(bv, c.b, c.dt);
    Tensor dc = hz::ops::matmul(a.to(Device::cuda()), b.to(Device::cuda()), c.ta, c.tb, c.alpha);
    EXPECT_TRUE(dc.device().is_cuda());
    EXPECT_EQ(dc.shape(), os);
    const hzt::Tol t = hzt::tol_for(c.dt);
    EXPECT_TRUE(hzt::all_close(dc, want, t.rtol, t.atol, &mag));
    EXPECT_TRUE(hzt::all_close(dc, hz::ops::matmul(a, b, c.ta, c.tb, c.alpha).to_vector(), t.rtol, t.atol, &mag));
  }
}

// Non-contiguous device tensors: broadcast batch operands of matmul (expanded, stride 0), transposed
// device views, and reading such views back to the host. Run in a child process (threadsafe death-test
// style: the child re-executes the binary, which is safe with CUDA) so that a crash fails this test
// instead of killing the whole suite; the child exits 0 only when every result matches the CPU.
bool noncontiguous_device_ops_ok() {
  bool ok = true;
  auto check = [&](const Tensor& dev, const Tensor& cpu_result) {
    const std::vector<double> want = cpu_result.to_vector(), got = dev.to(Device::cpu()).to_vector();
    if (want.size() != got.size()) return void(ok = false);
    for (size_t i = 0; i < want.size(); ++i)
      if (std::fabs(want[i] - got[i]) > 1e-4 * (1 + std::fabs(want[i]))) ok = false;
  };
  const DType f = DType::F32;
  Tensor a = hzt::make_tensor(hzt::rand_values(2 * 3 * 5 * 4, 7, -1, 1, f), {2, 3, 5, 4}, f);
  Tensor b = hzt::make_tensor(hzt::rand_values(4 * 6, 8, -1, 1, f), {4, 6}, f);
  Tensor a2 = hzt::make_tensor(hzt::rand_values(5 * 4, 9, -1, 1, f), {5, 4}, f);
  Tensor b3 = hzt::make_tensor(hzt::rand_values(3 * 4 * 6, 10, -1, 1, f), {3, 4, 6}, f);
  Tensor da = a.to(Device::cuda()), db = b.to(Device::cuda());
  check(hz::ops::matmul(da, db), hz::ops::matmul(a, b));                       // 2-D b shared by the batch
  check(hz::ops::matmul(a2.to(Device::cuda()), b3.to(Device::cuda())), hz::ops::matmul(a2, b3));  // 2-D a
  // transposed views as operands, with and without the transpose flag: (6, 4) x (4, 6) and (6, 4)^T x (6, 4)
  check(hz::ops::matmul(db.transpose(0, 1), db), hz::ops::matmul(b.transpose(0, 1), b));
  check(hz::ops::matmul(db.transpose(0, 1), db.transpose(0, 1), true, false),
        hz::ops::matmul(b.transpose(0, 1), b.transpose(0, 1), true, false));
  check(db.transpose(0, 1).contiguous(), b.transpose(0, 1));                    // strided device copy
  check(db.transpose(0, 1), b.transpose(0, 1));                                 // to(cpu) of a view
  return ok;
}

TEST_F(CudaTest, NonContiguousDeviceTensors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(noncontiguous_device_ops_ok() ? 0 : 1), ::testing::ExitedWithCode(0), "")
      << "a non-contiguous CUDA tensor (transposed view or expanded batch operand) crashed or gave "
         "wrong values";
}

}  // namespace
