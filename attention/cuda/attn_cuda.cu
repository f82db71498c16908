// Horizon: the fused attention's CUDA entry points (attention/fused_kernels.h): the kernel family
// (reference or tensor-core), the device and its compute stream, and the block counters, one
// triple of 64-bit integers per device kept on the device and read back only by attn_stats().
#include <array>
#include <mutex>

#include "attention/cuda/attn_cuda.h"
#include "attention/fused_kernels.h"
#include "core/cuda/common.cuh"

namespace hz::attn::detail {

namespace {

constexpr int kMaxDevices = 64;
std::mutex g_mutex;
std::array<Tensor, kMaxDevices> g_counters;  // (3) I64 per device, created on first use

cuda_impl::Counter* counters(int dev) {
  std::lock_guard<std::mutex> lock(g_mutex);
  HZ_CHECK(dev >= 0 && dev < kMaxDevices, DeviceError, "attention: CUDA device index ", dev, " out of range");
  if (!g_counters[dev].defined()) g_counters[dev] = Tensor::zeros({3}, DType::I64, Device::cuda(dev));
  return reinterpret_cast<cuda_impl::Counter*>(g_counters[dev].data<int64_t>());
}

}  // namespace

bool tensor_core_supported(DType dt, int64_t D, int device) { return cuda_impl::mma_supported(dt, D, device); }
AttnTiles tensor_core_tiles(DType dt, int64_t D, int device) { return cuda_impl::mma_tiles(dt, D, device); }
bool one_pass_backward() {
  return cuda_impl::one_pass_backward();
}
bool use_wgmma(const AttnKernelParams& P, DType dt, int device) { return cuda_impl::use_wgmma(P, dt, device); }

void cuda_forward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse) {
  const int dev = q.device().index;
  cuda::use_device(dev);
  cuda_impl::Counter* cnt = counters(dev);
  if (use_tc) cuda_impl::mma_forward(P, q, k, v, logn_c, fox_c, sink, out, lse, cnt, cuda::stream(dev));
  else cuda_impl::ref_forward(P, q, k, v, logn_c, fox_c, out, lse, cnt, cuda::stream(dev));
}

void cuda_backward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c,
                   const Tensor& sink, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dlogn_c_rows, Tensor* dfox_q,
                   Tensor* dfox_k, Tensor* dsink_rows, Tensor* ddist_q, Tensor* ddist_k) {
  const int dev = q.device().index;
  cuda::use_device(dev);
  cuda_impl::Counter* cnt = counters(dev);
  if (use_tc)
    cuda_impl::mma_backward(P, q, k, v, out, lse, gout, logn_c, fox_c, sink, dq, dk, dv, dlogn_c_rows, dfox_q, dfox_k,
                            dsink_rows, ddist_q, ddist_k, cnt, cuda::stream(dev));
  else
    cuda_impl::ref_backward(P, q, k, v, out, lse, gout, logn_c, fox_c, dq, dk, dv, dlogn_c_rows, dfox_q, dfox_k,
                            ddist_q, ddist_k, cnt, cuda::stream(dev));
}

AttnStats cuda_stats() {
  AttnStats s;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const Tensor& t : g_counters) {
    if (!t.defined()) continue;
    const std::vector<double> v = t.to_vector();  // waits for the device's queued kernels
    s.fwd_blocks += static_cast<int64_t>(v[0]);
    s.fwd_boundary_blocks += static_cast<int64_t>(v[1]);
    s.bwd_blocks += static_cast<int64_t>(v[2]);
  }
  return s;
}

void cuda_reset_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Tensor& t : g_counters)
    if (t.defined()) t.zero_();
}

}  // namespace hz::attn::detail
