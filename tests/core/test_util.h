// Horizon core tests: shared helpers.
//
// * Naive references: plain loops over row-major std::vector<double>, written independently of
//   the kernels in core/cpu/ (no strides, no blocking, no threading; double precision).
// * all_close(): compares a Tensor (any dtype, any layout) with a std::vector<double>.
// * Deterministic random values / tensors from hz::Generator, optionally laid out
//   non-contiguously (transposed storage, step-2 slices, padded rows) with the same logical values.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace hzt {

using hz::DType;
using hz::Shape;
using hz::Tensor;

// ---- shapes and indices ---------------------------------------------------------------------
inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Row-major multi-index of flat index `flat` in shape `s`.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

// numpy broadcasting, written out directly (returns false when incompatible).
inline bool ref_broadcast_shape(const Shape& a, const Shape& b, Shape& out) {
  const size_t n = std::max(a.size(), b.size());
  out.assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

// Flat index into an input of shape `in` for the output multi-index `out_idx` (broadcast rules:
// leading dims missing, size-1 dims repeat).
inline int64_t broadcast_source(const std::vector<int64_t>& out_idx, const Shape& in) {
  const size_t lead = out_idx.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : out_idx[lead + d]);
  return flat;
}

inline std::string shape_tag(const Shape& s) {
  if (s.empty()) return "scalar";
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

// ---- value rounding -------------------------------------------------------------------------
// Reference f32 -> bf16 round-to-nearest-even, by comparing distances to the two neighbouring
// bf16 values in double (independent of the bit trick in core/bf16.h). Finite inputs only.
inline uint16_t ref_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lo = u & 0xffff0000u;           // truncation toward zero in magnitude
  if (lo == u) return static_cast<uint16_t>(u >> 16);
  const uint32_t hi = lo + 0x10000u;             // next bf16 away from zero
  float flo, fhi;
  std::memcpy(&flo, &lo, 4);
  std::memcpy(&fhi, &hi, 4);
  const double x = std::fabs(static_cast<double>(f));
  const double dlo = std::fabs(static_cast<double>(flo));
  // above the largest finite bf16 the next value is Inf; IEEE rounds as if the exponent range
  // were unbounded, i.e. the "next" value is 2^128
  const double dhi = std::isinf(fhi) ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(fhi));
  const double to_lo = x - dlo, to_hi = dhi - x;
  if (to_lo < to_hi) return static_cast<uint16_t>(lo >> 16);
  if (to_hi < to_lo) return static_cast<uint16_t>(hi >> 16);
  return ((lo >> 16) & 1u) == 0 ? static_cast<uint16_t>(lo >> 16) : static_cast<uint16_t>(hi >> 16);
}
inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The value `x` takes when stored in dtype `dt` (floats round to nearest; ints truncate).
inline double round_to(double x, DType dt) {
  switch (dt) {
    case DType::F32: return static_cast<double>(static_cast<float>(x));
    case DType::F64: return x;
    case DType::BF16: return bits_to_float(static_cast<uint32_t>(ref_bf16_bits(static_cast<float>(x))) << 16);
    case DType::I32: return static_cast<double>(static_cast<int32_t>(x));
    case DType::I64: return static_cast<double>(static_cast<int64_t>(x));
    default: return x;
  }
}
inline std::vector<double> round_to(std::vector<double> v, DType dt) {
  for (double& x : v) x = round_to(x, dt);
  return v;
}

// ---- deterministic random values --------------------------------------------------------------
// n values uniform in [lo, hi), rounded to dtype `dt`. Same (n, seed, lo, hi, dt) -> same values.
inline std::vector<double> rand_values(int64_t n, uint64_t seed, double lo, double hi,
                                       DType dt = DType::F64) {
  if (n == 0) return {};
  hz::Generator g(seed, /*stream=*/1234);
  return round_to(g.uniform({n}, lo, hi, DType::F64).to_vector(), dt);
}
// n integers uniform in [lo, hi] (as doubles).
inline std::vector<double> rand_ints(int64_t n, uint64_t seed, int64_t lo, int64_t hi) {
  std::vector<double> v = rand_values(n, seed, 0.0, 1.0);
  for (double& x : v) {
    int64_t k = lo + static_cast<int64_t>(std::floor(x * static_cast<double>(hi - lo + 1)));
    x = static_cast<double>(std::min(k, hi));
  }
  return v;
}

// ---- layouts --------------------------------------------------------------------------------
// How a test tensor is laid out in memory. Logical values are the same in every layout.
enum class Layout {
  Contig,      // row-major contiguous
  Transposed,  // storage holds the last two dims swapped; the tensor is a transpose() view
  Sliced,      // last dim is a step-2 slice (offset 1) of a (2n+1)-wide buffer
  Padded,      // last dim is narrow(1, n) of an (n+3)-wide buffer (unit stride, row pitch n+3)
};
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contig: return "C";
    case Layout::Transposed: return "T";
    case Layout::Sliced: return "S";
    case Layout::Padded: return "P";
  }
  return "?";
}
constexpr double kSentinel = -999.0;  // fills the storage gaps of Sliced/Padded layouts

// Tensor of dtype `dt` and logical shape `shape` holding `values` (row-major), laid out as `lay`.
// `base`, when given, receives the underlying contiguous buffer tensor.
// ---- the device under test ---------------------------------------------------------------------
// Parameterised op tests carry a device field (CPU, and CUDA in CUDA builds: the CPU's cases run
// on CUDA too). HZT_ON_DEVICE(c.dev) at the top of a test body makes make_tensor() build its
// tensors there (same values, same strided layout) and skips the test without a usable GPU.
inline hz::Device& current_device() {
  static hz::Device d = hz::Device::cpu();
  return d;
}
struct DeviceScope {
  explicit DeviceScope(hz::Device d) : prev(current_device()) { current_device() = d; }
  ~DeviceScope() { current_device() = prev; }
  hz::Device prev;
};
#define HZT_ON_DEVICE(dev)                                                         \
  ::hzt::DeviceScope hzt_device_scope_(dev);                                      \
  if ((dev).is_cuda() && !::hz::cuda::available())                                \
  GTEST_SKIP() << "no usable CUDA device (" << (::hz::cuda::compiled() ? "no GPU/driver visible" \
                                                                      : "HZ_CUDA=OFF build") << ")"
// The cases of `v` on the CPU, then (in CUDA builds) the same cases on cuda:0.
template <class C>
std::vector<C> on_devices(std::vector<C> v) {
  if (!hz::cuda::compiled()) return v;
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) {
    C c = v[i];
    c.dev = hz::Device::cuda(0);
    v.push_back(c);
  }
  return v;
}
inline std::string device_tag(hz::Device d) { return d.is_cuda() ? "_cuda" : ""; }

inline Tensor make_tensor_host(const std::vector<double>& values, const Shape& shape, DType dt,
                               Layout lay, Tensor* base);
// `values` (row-major) as a tensor of dtype dt in layout `lay` on current_device(); `base`
// receives the whole underlying buffer (for checks that padding stays untouched).
inline Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DType dt,
                          Layout lay = Layout::Contig, Tensor* base = nullptr) {
  Tensor b;
  Tensor t = make_tensor_host(values, shape, dt, lay, &b);
  const hz::Device dev = current_device();
  if (!dev.is_cpu()) {
    b = b.to(dev);
    t = b.as_strided(t.shape(), t.strides(), t.offset());
  }
  if (base) *base = b;
  return t;
}

inline Tensor make_tensor_host(const std::vector<double>& values, const Shape& shape, DType dt,
                               Layout lay, Tensor* base) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (lay == Layout::Transposed && nd < 2) lay = Layout::Sliced;
  if (nd == 0) lay = Layout::Contig;
  Tensor b, t;
  if (lay == Layout::Contig) {
    b = t = Tensor::from_vector(values, shape, dt);
  } else if (lay == Layout::Transposed) {
    Shape ps = shape;
    std::swap(ps[nd - 1], ps[nd - 2]);
    std::vector<double> pv(values.size());
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      std::vector<int64_t> idx = unravel(i, shape);
      std::swap(idx[nd - 1], idx[nd - 2]);
      pv[ravel(idx, ps)] = values[i];
    }
    b = Tensor::from_vector(pv, ps, dt);
    t = b.transpose(-1, -2);
  } else {
    const int64_t n = shape[nd - 1];
    const bool sliced = lay == Layout::Sliced;
    Shape ps = shape;
    ps[nd - 1] = sliced ? 2 * n + 1 : n + 3;
    std::vector<double> pv(numel_of(ps), kSentinel);
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      std::vector<int64_t> idx = unravel(i, shape);
      idx[nd - 1] = sliced ? 2 * idx[nd - 1] + 1 : idx[nd - 1] + 1;
      pv[ravel(idx, ps)] = values[i];
    }
    b = Tensor::from_vector(pv, ps, dt);
    t = sliced ? b.slice(-1, 1, 2 * n + 1, 2) : b.narrow(-1, 1, n);
  }
  if (base) *base = b;
  return t;
}

// Random tensor (uniform in [lo, hi)) and its logical values (already rounded to dt).
struct RandTensor {
  Tensor t;
  std::vector<double> v;
};
inline RandTensor rand_tensor(const Shape& shape, DType dt, uint64_t seed, double lo = -1.0,
                              double hi = 1.0, Layout lay = Layout::Contig) {
  RandTensor r;
  r.v = rand_values(numel_of(shape), seed, lo, hi, dt);
  r.t = make_tensor(r.v, shape, dt, lay);
  return r;
}

// ---- comparison -------------------------------------------------------------------------------
struct Tol {
  double rtol, atol;
};
// f64 and f32: their rounding of a short computation. bf16 (computed in f32, rounded once on
// store): half a bf16 ulp of the result, 2^-8 relative, plus the f32 compute error.
inline Tol tol_for(DType dt) {
  return dt == DType::F64 ? Tol{1e-12, 1e-13} : dt == DType::BF16 ? Tol{4e-3, 1e-6} : Tol{1e-5, 1e-6};
}

// Elementwise |got - want| <= atol + rtol * scale_i, with scale_i = mag[i] when mag is given
// (e.g. sum of |terms| for a dot product) and |want_i| otherwise. NaN matches NaN, +-Inf must
// match exactly. Also checks the element count.
inline ::testing::AssertionResult all_close(const Tensor& t, const std::vector<double>& want,
                                            double rtol, double atol,
                                            const std::vector<double>* mag = nullptr) {
  if (!t.defined()) return ::testing::AssertionFailure() << "tensor is undefined";
  if (t.numel() != static_cast<int64_t>(want.size()))
    return ::testing::AssertionFailure() << "numel " << t.numel() << " (shape "
                                         << hz::shape_str(t.shape()) << ") vs " << want.size()
                                         << " expected values";
  const std::vector<double> got = t.to_vector();
  int64_t bad = 0;
  double worst = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w) || std::isnan(g)) ok = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g)) ok = g == w;
    else {
      const double scale = mag ? (*mag)[i] : std::fabs(w);
      const double err = std::fabs(g - w), lim = atol + rtol * scale;
      ok = err <= lim;
      if (!ok) worst = std::max(worst, err / std::max(lim, 1e-300));
    }
    if (!ok) {
      if (bad < 8) {
        msg << "\n  [" << i << "] (index " << hz::shape_str(unravel(static_cast<int64_t>(i), t.shape()))
            << ") got " << g << " want " << w;
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size()
                                       << " elements differ (rtol " << rtol << ", atol " << atol
                                       << ", worst err/limit " << worst << ") in " << t.str()
                                       << msg.str();
}
inline ::testing::AssertionResult all_close(const Tensor& t, const std::vector<double>& want,
                                            Tol tol, const std::vector<double>* mag = nullptr) {
  return all_close(t, want, tol.rtol, tol.atol, mag);
}
// Exact equality of values (as doubles).
inline ::testing::AssertionResult all_equal(const Tensor& t, const std::vector<double>& want) {
  return all_close(t, want, 0.0, 0.0);
}

// Two results that differ in exact arithmetic differ by far more than rounding: max_i |a_i - b_i| >
// rel * max_i max(|a_i|, |b_i|). A bare EXPECT_NE also passes on a last-bit difference, and fails where
// two roundings of the same exact value happen to agree. Scalars: |a - b| > rel * max(|a|, |b|).
inline ::testing::AssertionResult differs(const std::vector<double>& a, const std::vector<double>& b, double rel) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max({scale, std::fabs(a[i]), std::fabs(b[i])});
  }
  if (diff > rel * scale) return ::testing::AssertionSuccess() << "max |a - b| / scale = " << diff / scale;
  return ::testing::AssertionFailure() << "max |a - b| = " << diff << " is not above " << rel << " x the scale "
                                       << scale << " (relative difference " << (scale > 0 ? diff / scale : 0.0)
                                       << "): the results agree up to rounding";
}
inline ::testing::AssertionResult differs(double a, double b, double rel) {
  return differs(std::vector<double>{a}, std::vector<double>{b}, rel);
}
// The usual margins, 100x and more above rounding: a loss of a few nats computed in f32 rounds to ~1e-7
// relative (the tests' changed losses move by 1e-4 to 1e-1); f32 vectors round at ~1e-7 of their largest value.
constexpr double kLossDiffers = 1e-5, kValuesDiffer = 1e-4;

// ---- naive references ---------------------------------------------------------------------------
// Elementwise binary op with numpy broadcasting.
template <class F>
std::vector<double> ref_binary(const std::vector<double>& a, const Shape& sa,
                               const std::vector<double>& b, const Shape& sb, F f, Shape* out_shape) {
  Shape os;
  if (!ref_broadcast_shape(sa, sb, os)) ADD_FAILURE() << "test bug: shapes do not broadcast";
  std::vector<double> out(numel_of(os));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    const std::vector<int64_t> idx = unravel(i, os);
    out[i] = f(a[broadcast_source(idx, sa)], b[broadcast_source(idx, sb)]);
  }
  if (out_shape) *out_shape = os;
  return out;
}

// x viewed as (outer, n, inner) around dim: the three nested loops of a reduction.
struct Around {
  int64_t outer = 1, n = 1, inner = 1;
};
inline Around around_dim(const Shape& s, int64_t dim) {
  Around a;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < dim) a.outer *= s[i];
    else if (i == dim) a.n = s[i];
    else a.inner *= s[i];
  }
  return a;
}
inline Shape reduced_shape(Shape s, int64_t dim, bool keepdim) {
  if (keepdim) s[dim] = 1;
  else s.erase(s.begin() + dim);
  return s;
}

// Batched matmul: C[batch..., M, N] = alpha * op(A) op(B), A stored as (batch_a..., ra, ca)
// row-major values (op(A) = A or A^T), same for B; batch dims broadcast.
inline std::vector<double> ref_matmul(const std::vector<double>& a, const Shape& sa,
                                      const std::vector<double>& b, const Shape& sb, bool ta,
                                      bool tb, double alpha, Shape* out_shape,
                                      std::vector<double>* mag = nullptr) {
  const int64_t ra = sa[sa.size() - 2], ca = sa[sa.size() - 1];
  const int64_t rb = sb[sb.size() - 2], cb = sb[sb.size() - 1];
  const int64_t M = ta ? ca : ra, K = ta ? ra : ca, N = tb ? rb : cb;
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch;
  if (!ref_broadcast_shape(ba, bb, batch)) ADD_FAILURE() << "test bug: batch shapes";
  const int64_t nbatch = numel_of(batch);
  Shape os = batch;
  os.push_back(M);
  os.push_back(N);
  std::vector<double> c(numel_of(os), 0.0);
  if (mag) mag->assign(c.size(), 0.0);
  for (int64_t p = 0; p < nbatch; ++p) {
    const std::vector<int64_t> bidx = unravel(p, batch);
    const int64_t pa = broadcast_source(bidx, ba), pb = broadcast_source(bidx, bb);
    const double* A = a.data() + pa * ra * ca;
    const double* B = b.data() + pb * rb * cb;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0, m = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = ta ? A[k * ca + i] : A[i * ca + k];
          const double bv = tb ? B[j * cb + k] : B[k * cb + j];
          acc += av * bv;
          m += std::fabs(av * bv);
        }
        c[(p * M + i) * N + j] = alpha * acc;
        if (mag) (*mag)[(p * M + i) * N + j] = std::fabs(alpha) * m;
      }
    }
  }
  if (out_shape) *out_shape = os;
  return c;
}

// Denormal flushing (core/device.h): the subnormal f32 values of a tensor, and a guard that puts
// the process's setting back whatever a test does.
inline int64_t count_subnormals(const hz::Tensor& t) {
  int64_t n = 0;
  for (double v : t.to(hz::DType::F64).to_vector())
    if (v != 0 && std::fpclassify(static_cast<float>(v)) == FP_SUBNORMAL) ++n;
  return n;
}
struct FlushGuard {
  bool was = hz::cpu::flush_denormals();
  ~FlushGuard() { hz::cpu::set_flush_denormals(was); }
};

}  // namespace hzt
