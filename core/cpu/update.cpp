// Horizon CPU kernels outside the op families: random fills, the rotary rotation, the max
// backward's scatter, sums of squares (gradient clipping) and the optimizers' per-element updates.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu/fast_math.h"
#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"
#include "core/math.h"
#include "core/multi_tensor.h"
#include "core/philox.h"

namespace hz::cpu {

using math::load;
using math::store;

void random_fill(Tensor& dst, const RandomFill& r) {
  const int64_t n = dst.numel();
  const bool f32 = dst.dtype() != DType::F64;
  dispatch_all_float(dst.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    T* out = static_cast<T*>(dst.raw_data());
#pragma omp parallel for schedule(static) if (n > 4096)
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t a = philox::word(r.seed, r.stream, r.offset + 2 * static_cast<uint64_t>(i));
      const uint32_t b = philox::word(r.seed, r.stream, r.offset + 2 * static_cast<uint64_t>(i) + 1);
      const double v = r.kind == RandomKind::Normal ? philox::normal(a, b, r.a, r.b)
                                                    : philox::uniform(a, b, r.a, r.b, f32);
      out[i] = math::convert<T, double>(v);
    }
  });
}

Tensor rotary(const Tensor& x_in, const Tensor& positions_in, const RotaryParams& p) {
  const int64_t B = x_in.size(0), H = x_in.size(1), T = x_in.size(2), D = x_in.size(3), half = D / 2;
  // rows read in place when each is unit-stride (the heads' (B, T, H, D) -> (B, H, T, D) view of a
  // projection), so no contiguous copy is made first; the output is contiguous
  const Tensor x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
  const int64_t sb = x.stride(0), sh = x.stride(1), st = x.stride(2);
  // f64 positions (between integers) take one table row per id; integer ones as below
  const bool real = positions_in.dtype() == DType::F64;
  const Tensor positions = positions_in.to(DType::I64).contiguous();
  const Tensor positions_f = real ? positions_in.contiguous() : Tensor();
  const int64_t* pp = positions.data<int64_t>();
  const double* pf = real ? positions_f.data<double>() : nullptr;
  // cos/sin table in double, then applied in the tensor's compute type. Positions are (T) or
  // (B, T) ids; when they all lie in [0, P) with P <= their count (arange, or per-document
  // positions that restart), the table has one row per position value, else one per id.
  const int64_t np = positions.numel();
  int64_t lo = 0, hi = -1;
  for (int64_t i = 0; i < np; ++i) {
    lo = std::min(lo, pp[i]);
    hi = std::max(hi, pp[i]);
  }
  const bool by_value = !real && lo >= 0 && hi < np;
  const int64_t rows = by_value ? hi + 1 : np;
  std::vector<double> cs(rows * half), sn(rows * half);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t m = 0; m < half; ++m) {
      const double a = (by_value ? static_cast<double>(t) : real ? pf[t] : static_cast<double>(pp[t])) * p.inv_freq[m];
      cs[t * half + m] = std::cos(a) * p.mscale;
      sn[t * half + m] = (p.inverse ? -std::sin(a) : std::sin(a)) * p.mscale;
    }
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_all_float(x.dtype(), [&](auto tag) { using S = decltype(tag); using A = math::acc_t<S>;
    const S* xp = static_cast<const S*>(x.raw_data());
    S* op = static_cast<S*>(out.raw_data());
#pragma omp parallel for schedule(static) if (B * H * T * D > 32768)
    for (int64_t r = 0; r < B * H * T; ++r) {
      const int64_t id = np == T ? r % T : (r / (H * T)) * T + r % T;
      const int64_t t = by_value ? pp[id] : id;
      const S* xr = xp + (r / (H * T)) * sb + (r / T % H) * sh + (r % T) * st;
      S* o = op + r * D;
      const double* c = cs.data() + t * half;
      const double* s = sn.data() + t * half;
      for (int64_t m = 0; m < half; ++m) {
        const A x1 = load(xr[m]), x2 = load(xr[m + half]);
        const A cm = static_cast<A>(c[m]), sm = static_cast<A>(s[m]);
        o[m] = store<S>(x1 * cm - x2 * sm);
        o[m + half] = store<S>(x1 * sm + x2 * cm);
      }
    }
  });
  return out;
}

namespace {
// angle element (b, g, t, m) of a contiguous (Ba, G, T, half) table as double
template <class F>
void dispatch_angles(DType dt, F&& f) {
  if (dt == DType::F64) f(double{});
  else f(float{});
}
}  // namespace

Tensor rotate_angles(const Tensor& x_in, const Tensor& angles_in, double mscale, bool inverse) {
  const int64_t B = x_in.size(0), H = x_in.size(1), T = x_in.size(2), D = x_in.size(3), half = D / 2;
  const int64_t Ba = angles_in.size(0), G = angles_in.size(1), per = H / G;
  const Tensor x = x_in.contiguous(), angles = angles_in.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_all_float(x.dtype(), [&](auto tag) { using S = decltype(tag); using A = math::acc_t<S>;
    dispatch_angles(angles.dtype(), [&](auto atag) { using P = decltype(atag);
      const S* xp = static_cast<const S*>(x.raw_data());
      const P* ap = static_cast<const P*>(angles.raw_data());
      S* op = static_cast<S*>(out.raw_data());
#pragma omp parallel for schedule(static) if (B * H * T * D > 32768)
      for (int64_t r = 0; r < B * H * T; ++r) {
        const int64_t b = r / (H * T), h = (r / T) % H, t = r % T;
        const P* a = ap + (((Ba == 1 ? 0 : b) * G + h / per) * T + t) * half;
        const S* xr = xp + r * D;
        S* o = op + r * D;
        for (int64_t m = 0; m < half; ++m) {
          const double th = static_cast<double>(a[m]);
          const A cm = static_cast<A>(std::cos(th) * mscale);
          const A sm = static_cast<A>((inverse ? -std::sin(th) : std::sin(th)) * mscale);
          const A x1 = load(xr[m]), x2 = load(xr[m + half]);
          o[m] = store<S>(x1 * cm - x2 * sm);
          o[m + half] = store<S>(x1 * sm + x2 * cm);
        }
      }
    });
  });
  return out;
}

// One (b, g, t) row of the angles per iteration: its heads (and batch rows when the angles are
// shared over the batch) summed in order, in double.
Tensor rotate_angles_grad(const Tensor& y_in, const Tensor& gy_in, const Tensor& angles, bool inverse) {
  const int64_t B = y_in.size(0), H = y_in.size(1), T = y_in.size(2), D = y_in.size(3), half = D / 2;
  const int64_t Ba = angles.size(0), G = angles.size(1), per = H / G;
  const Tensor y = y_in.contiguous(), gy = gy_in.contiguous();
  Tensor out = Tensor::empty(angles.shape(), angles.dtype());
  const double sign = inverse ? -1.0 : 1.0;
  dispatch_all_float(y.dtype(), [&](auto tag) { using S = decltype(tag);
    dispatch_angles(angles.dtype(), [&](auto atag) { using P = decltype(atag);
      const S* yp = static_cast<const S*>(y.raw_data());
      const S* gp = static_cast<const S*>(gy.raw_data());
      P* op = static_cast<P*>(out.raw_data());
#pragma omp parallel for schedule(static) if (B * H * T * D > 32768)
      for (int64_t r = 0; r < Ba * G * T; ++r) {
        const int64_t ba = r / (G * T), g = (r / T) % G, t = r % T;
        std::vector<double> acc(half, 0.0);
        for (int64_t b = (Ba == 1 ? 0 : ba); b < (Ba == 1 ? B : ba + 1); ++b)
          for (int64_t h = g * per; h < (g + 1) * per; ++h) {
            const int64_t row = ((b * H + h) * T + t) * D;
            const S* yr = yp + row;
            const S* gr = gp + row;
            for (int64_t m = 0; m < half; ++m)
              acc[m] += static_cast<double>(load(gr[m + half])) * static_cast<double>(load(yr[m])) -
                        static_cast<double>(load(gr[m])) * static_cast<double>(load(yr[m + half]));
          }
        for (int64_t m = 0; m < half; ++m) op[r * half + m] = static_cast<P>(sign * acc[m]);
      }
    });
  });
  return out;
}

Tensor scatter_dim(const Tensor& src_in, const Tensor& index_in, int64_t dim, const Shape& out_shape) {
  Tensor out = Tensor::zeros(out_shape, src_in.dtype());
  const Tensor src = src_in.contiguous(), ix = index_in.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= out_shape[i];
  for (size_t i = dim + 1; i < out_shape.size(); ++i) inner *= out_shape[i];
  const int64_t n = out_shape[dim];
  const int64_t* ip = ix.data<int64_t>();
  const size_t es = dtype_size(src.dtype());
  const char* sp = static_cast<const char*>(src.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t k = ip[o * inner + i];
      HZ_CHECK(k >= 0 && k < n, ValueError, "scatter_dim: index ", k, " outside [0, ", n, ")");
      std::memcpy(op + ((o * n + k) * inner + i) * es, sp + (o * inner + i) * es, es);
    }
  return out;
}

// Fixed chunks summed in parallel, then combined in order: deterministic and independent of the
// thread count.
double sum_squares(const std::vector<Tensor>& xs) {
  double total = 0.0;
  for (const Tensor& x_in : xs) {
    const Tensor x = x_in.contiguous();
    const int64_t n = x.numel();
    dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
      const T* xp = static_cast<const T*>(x.raw_data());
      constexpr int64_t kChunk = 16384;
      const int64_t nchunks = (n + kChunk - 1) / kChunk;
      std::vector<double> part(std::max<int64_t>(nchunks, 1), 0.0);
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t c = 0; c < nchunks; ++c) {
        const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
        part[c] = lane_sum(hi - lo, [&](int64_t i) {
          const double v = load(xp[lo + i]);
          return v * v;
        });
      }
      for (double v : part) total += v;
    });
  }
  return total;
}

void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const math::AdamWCoef& c) {
  const int64_t n = p.numel();
  dispatch_float(p.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    T* pp = p.data<T>();
    const T* gp = g.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
#pragma omp parallel for schedule(static) if (n > 8192)
    for (int64_t i = 0; i < n; ++i) math::adamw_element(pp[i], gp[i], mp[i], vp[i], c);
  });
}

// The multi-tensor table's blocks (core/multi_tensor.h) over OpenMP, each its range with unit stride.
void adamw_multi_update(std::vector<ops::AdamWSlot>& slots, const math::AdamWCoef& c) {
  std::vector<multi::AdamWTensor> ts;
  for (ops::AdamWSlot& s : slots)
    ts.push_back({s.p.raw_data(), s.g.raw_data(), s.m.raw_data(), s.v.raw_data(), s.p.numel(), s.lr, s.decay});
  dispatch_float(slots.front().p.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    for (const multi::AdamWBatch<T>& b : multi::adamw_batches<T>(ts)) {
      const int64_t nb = b.blocks();
#pragma omp parallel for schedule(static) if (nb > 1)
      for (int64_t blk = 0; blk < nb; ++blk) multi::adamw_block_host(b, c, blk);
    }
  });
}

void momentum_update(const Tensor& g, Tensor& buf, Tensor& out, double mu, bool nesterov, double gscale) {
  const int64_t n = buf.numel();
  dispatch_float(buf.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* gp = g.data<T>();
    T* b = buf.data<T>();
    T* u = out.data<T>();
#pragma omp parallel for schedule(static) if (n > 8192)
    for (int64_t i = 0; i < n; ++i) {
      const double gi = math::scaled_grad(gp[i], gscale);
      b[i] = static_cast<T>(mu * static_cast<double>(b[i]) + (1.0 - mu) * gi);
      u[i] = nesterov ? static_cast<T>((1.0 - mu) * gi + mu * static_cast<double>(b[i])) : b[i];
    }
  });
}

}  // namespace hz::cpu
