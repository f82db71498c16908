// Horizon: the backend table. Every kernel sits behind one table per device type: core/ops.cpp
// checks arguments and calls the entry of the tensors' device; Tensor's allocation, copies and
// fill go through the same table. An entry a device lacks is a null pointer, and calling it
// throws NotImplementedError naming the op and the device by itself (no per-op stubs).
//
// Contracts shared by every backend (the CPU's is core/cpu/backend.cpp, CUDA's
// core/cuda/backend.cu):
//   * inputs arrive checked (shapes, dtypes, devices) and may be any strided view unless an entry
//     says "contiguous"; outputs are fresh contiguous tensors on the inputs' device;
//   * floating dtypes are f32, f64 and bf16 (bf16 computes in f32, see core/math.h) unless an
//     entry says otherwise; the math of elementwise ops is core/math.h on every device;
//   * results are deterministic: each output element is accumulated in a fixed order (no float
//     atomics), so a backend gives bitwise-identical results run to run.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/math.h"
#include "core/ops.h"

namespace hz {

struct Backend {
  const char* name;
  // ---- memory ---------------------------------------------------------------------------------
  void* (*alloc)(size_t bytes, int device);
  void (*release)(void* p, size_t bytes, int device);  // never throws
  void (*upload)(void* dst, const void* host_src, size_t bytes, int device);
  void (*download)(void* host_dst, const void* src, size_t bytes, int device);
  void (*synchronize)(int device);
  DeviceMemoryStats (*memory_stats)(int device);
  void (*reset_peak)(int device);
  // ---- tensor basics --------------------------------------------------------------------------
  void (*copy)(const Tensor& src, Tensor& dst);  // same device and shape, any dtypes and strides
  void (*fill)(Tensor& dst, double v);
  void (*random_fill)(Tensor& dst, const RandomFill& r);  // dst contiguous, floating
  // ---- elementwise ----------------------------------------------------------------------------
  Tensor (*unary)(UnaryOp op, const Tensor& x);
  Tensor (*unary_backward)(UnaryOp op, const Tensor& x, const Tensor& gout);
  Tensor (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& out_shape);
  Tensor (*scalar_op)(const Tensor& x, double mul, double add, double pow);  // (x^pow)*mul + add
  void (*add_inplace)(Tensor& dst, const Tensor& src, double alpha);      // src broadcasts
  void (*axpby)(Tensor& x, const Tensor& y, double alpha, double beta);   // x = alpha x + beta y (y may be undefined)
  // silu(a) * b and its gradients (core/ops.h); a, b, g contiguous, one shape and dtype
  Tensor (*swiglu)(const Tensor& a, const Tensor& b);
  ops::SwiGluGrads (*swiglu_backward)(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b);
  // ---- reductions -----------------------------------------------------------------------------
  Tensor (*reduce_dim)(ReduceOp op, const Tensor& x, int64_t dim, bool keepdim, Tensor* argmax);
  Tensor (*reduce_all)(ReduceOp op, const Tensor& x);
  // inclusive prefix sums along dim (reverse: suffix sums), accumulated in the accumulation dtype
  // (double on the CPU) one element after another
  Tensor (*cumsum)(const Tensor& x, int64_t dim, bool reverse);
  // sum of x*x over every tensor of the list, accumulated in double (f32 pairs on CUDA), in a
  // fixed order; one host transfer in all.
  double (*sum_squares)(const std::vector<Tensor>& xs);
  // out (out_shape, zeros) with out[..., index[...], ...] = src along dim; index (I64) has
  // src's shape (the max backward).
  Tensor (*scatter_dim)(const Tensor& src, const Tensor& index, int64_t dim, const Shape& out_shape);
  // ---- products -------------------------------------------------------------------------------
  Tensor (*matmul)(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha,
                   const Shape& batch_shape);
  // ---- softmax family, nn ---------------------------------------------------------------------
  Tensor (*softmax)(const Tensor& x, int64_t dim, bool log);
  Tensor (*softmax_backward)(const Tensor& y, const Tensor& g, int64_t dim, bool log);
  Tensor (*embedding)(const Tensor& weight, const Tensor& ids);
  Tensor (*embedding_backward)(const Tensor& gout, const Tensor& ids, int64_t vocab);
  CrossEntropyResult (*cross_entropy)(const Tensor& logits, const Tensor& targets,
                                      const Tensor& weights, int64_t ignore_index);
  Tensor (*cross_entropy_backward)(const Tensor& logits, const Tensor& targets, const Tensor& weights,
                                   const Tensor& lse, double weight_sum, int64_t ignore_index,
                                   double gscale);
  Tensor (*cross_entropy_rows)(const Tensor& logits, const Tensor& targets, int64_t ignore_index);
  // residual / gres: undefined, or contiguous with x's shape and dtype (core/ops.h)
  ops::RmsNormResult (*rms_norm)(const Tensor& x, const Tensor& w, double eps, const Tensor& residual);
  ops::RmsNormGrads (*rms_norm_backward)(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                         const Tensor& gout, bool need_gx, bool need_gw, const Tensor& gres);
  Tensor (*rotary)(const Tensor& x, const Tensor& positions, const RotaryParams& p);  // x (B, H, T, D)
  // x (B, Hx, T, D) by angles (B or 1, G, T, D/2) f32/f64, and the angles' gradient (core/ops.h)
  Tensor (*rotate_angles)(const Tensor& x, const Tensor& angles, double mscale, bool inverse);
  Tensor (*rotate_angles_grad)(const Tensor& y, const Tensor& gy, const Tensor& angles, bool inverse);
  // ---- optimizer updates (in place; p, m, v contiguous, same shape) --------------------------
  void (*adamw_update)(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const math::AdamWCoef& c);
  // slots of one device and dtype (f32 or f64), g in that dtype, everything contiguous
  void (*adamw_multi_update)(std::vector<ops::AdamWSlot>& slots, const math::AdamWCoef& c);
  // buf = mu buf + (1 - mu) g*;  out = nesterov ? (1 - mu) g* + mu buf : buf  (g* = scaled_grad(g, gscale))
  void (*momentum_update)(const Tensor& g, Tensor& buf, Tensor& out, double mu, bool nesterov, double gscale);
};

// The table of a device type. CUDA in a build without it throws DeviceError saying how to get one.
const Backend& backend(Device d);
const Backend& cpu_backend();

namespace detail {
extern std::atomic<uint64_t> backend_call_count;  // hz::backend_calls() (core/device.h)
extern std::atomic<bool> profile_on;              // hz::profiling() (core/profile.cpp)
[[noreturn]] void missing_entry(const char* entry, Device d);
// An entry as HZ_BACKEND hands it out: calling it counts the call and, while a profile is taken,
// times it (core/device.h's ProfileScope).
template <class F>
struct Entry;
template <class R, class... A>
struct Entry<R (*)(A...)> {
  R (*f)(A...);
  const char* name;
  Device d;
  R operator()(A... x) const {
    backend_call_count.fetch_add(1, std::memory_order_relaxed);
    if (!profile_on.load(std::memory_order_relaxed)) return f(std::forward<A>(x)...);
    ProfileScope scope(name, d);
    return f(std::forward<A>(x)...);
  }
};
template <class F>
Entry<F> backend_entry(Device d, F Backend::*member, const char* entry) {
  F f = backend(d).*member;
  if (f == nullptr) missing_entry(entry, d);
  return {f, entry, d};
}
}  // namespace detail

// The entry `name` of the backend of device `dev`, e.g. HZ_BACKEND(x.device(), unary)(op, x).
#define HZ_BACKEND(dev, name) ::hz::detail::backend_entry((dev), &::hz::Backend::name, #name)

}  // namespace hz
