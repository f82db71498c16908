// Horizon CPU kernels: embedding gather / scatter-add, RMSNorm forward and backward.
// bf16 tensors compute in f32 (core/math.h); RMSNorm's statistics are always accumulated in double
// and its gain may be f32 while x is bf16 (mixed precision: f32 parameters, bf16 activations).
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"
#include "core/math.h"

namespace hz::cpu {

using math::load;
using math::store;

template <class I>
static void check_ids(const I* ip, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    HZ_CHECK(ip[i] >= 0 && ip[i] < V, ValueError, "embedding: id ", static_cast<int64_t>(ip[i]),
             " at position ", i, " is outside the vocabulary [0, ", V, ")");
}

Tensor embedding(const Tensor& weight_in, const Tensor& ids_in) {
  const Tensor w = weight_in.contiguous(), ids = ids_in.contiguous();
  const int64_t V = w.size(0), C = w.size(1), n = ids.numel();
  Shape os = ids.shape();
  os.push_back(C);
  Tensor out = Tensor::empty(os, w.dtype());
  const size_t es = dtype_size(w.dtype());
  dispatch_index(ids.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    const I* ip = ids.data<I>();
    check_ids(ip, n, V);
    const char* wp = static_cast<const char*>(w.raw_data());
    char* op_ = static_cast<char*>(out.raw_data());
#pragma omp parallel for schedule(static) if (n * C > 32768)
    for (int64_t i = 0; i < n; ++i) std::memcpy(op_ + i * C * es, wp + ip[i] * C * es, C * es);
  });
  return out;
}

Tensor embedding_backward(const Tensor& gout_in, const Tensor& ids_in, int64_t V) {
  const Tensor g = gout_in.contiguous(), ids = ids_in.contiguous();
  const int64_t C = g.size(-1), n = ids.numel();
  Tensor out = Tensor::zeros({V, C}, acc_dtype(g.dtype()));
  dispatch_all_float(g.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
   dispatch_index(ids.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    const I* ip = ids.data<I>();
    check_ids(ip, n, V);
    const T* gp = static_cast<const T*>(g.raw_data());
    A* op_ = static_cast<A*>(out.raw_data());
    // Each thread owns a block of columns and adds the rows in order: deterministic.
    constexpr int64_t kCols = 64;
    const int64_t nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (n * C > 32768)
    for (int64_t blk = 0; blk < nblk; ++blk) {
      const int64_t c0 = blk * kCols, c1 = std::min(C, c0 + kCols);
      for (int64_t i = 0; i < n; ++i) {
        A* dst = op_ + ip[i] * C;
        const T* src = gp + i * C;
        for (int64_t c = c0; c < c1; ++c) dst[c] += load(src[c]);
      }
    }
  }); });
  return out.dtype() == g.dtype() ? out : out.to(g.dtype());
}

ops::RmsNormResult rms_norm(const Tensor& x_in, const Tensor& w_in, double eps, const Tensor& res_in) {
  const Tensor x = x_in.contiguous();
  const Tensor w = w_in.defined() ? w_in.contiguous() : Tensor();
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  ops::RmsNormResult res;
  res.y = Tensor::empty(x.shape(), x.dtype());
  Shape rs = x.shape();
  rs.pop_back();
  res.rstd = Tensor::empty(rs, acc_dtype(x.dtype()));
  if (res_in.defined()) res.sum = Tensor::empty(x.shape(), x.dtype());
  dispatch_x_w(x.dtype(), w.defined() ? w.dtype() : x.dtype(), [&](auto xt, auto wt) {
    using T = decltype(xt); using W = decltype(wt); using A = math::acc_t<T>;
    const T* xp = static_cast<const T*>(x.raw_data());
    const T* rp = res_in.defined() ? static_cast<const T*>(res_in.raw_data()) : nullptr;
    T* hp = rp ? static_cast<T*>(res.sum.raw_data()) : nullptr;
    const W* wp = w.defined() ? static_cast<const W*>(w.raw_data()) : nullptr;
    T* yp = static_cast<T*>(res.y.raw_data());
    A* sp = static_cast<A*>(res.rstd.raw_data());
#pragma omp parallel for schedule(static) if (R * C > 16384)
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = xp + r * C;
      if (rp) {  // the residual stream's add, rounded as ops::add rounds it; the row is normed from there
        T* hr = hp + r * C;
        const T* rr = rp + r * C;
        for (int64_t c = 0; c < C; ++c) hr[c] = store<T>(load(xr[c]) + load(rr[c]));
        xr = hr;
      }
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(load(xr[c])) * load(xr[c]);
      const A rstd = static_cast<A>(1.0 / std::sqrt(ss / C + eps));
      sp[r] = rstd;
      T* yr = yp + r * C;
      if (wp) for (int64_t c = 0; c < C; ++c) yr[c] = store<T>(load(xr[c]) * rstd * static_cast<A>(load(wp[c])));
      else for (int64_t c = 0; c < C; ++c) yr[c] = store<T>(load(xr[c]) * rstd);
    }
  });
  return res;
}

ops::RmsNormGrads rms_norm_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& rstd_in,
                                    const Tensor& g_in, bool need_gx, bool need_gw, const Tensor& gres) {
  const Tensor x = x_in.contiguous(), g = g_in.contiguous();
  const Tensor rstd = rstd_in.to(acc_dtype(x.dtype())).contiguous();
  const Tensor w = w_in.defined() ? w_in.contiguous() : Tensor();
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  ops::RmsNormGrads res;
  dispatch_x_w(x.dtype(), w.defined() ? w.dtype() : x.dtype(), [&](auto xt, auto wt) {
    using T = decltype(xt); using W = decltype(wt); using A = math::acc_t<T>;
    const T* xp = static_cast<const T*>(x.raw_data());
    const W* wp = w.defined() ? static_cast<const W*>(w.raw_data()) : nullptr;
    const A* sp = static_cast<const A*>(rstd.raw_data());
    const T* gp = static_cast<const T*>(g.raw_data());
    auto wv = [&](int64_t c) { return wp ? static_cast<A>(load(wp[c])) : A(1); };
    if (need_gx) {
      // gx = rstd * (gy - xhat * mean(gy * xhat)), gy = g * w, xhat = x * rstd; with gres, gres + gx
      // (gx rounded to T first, then the sum rounded: ops::add of the two)
      res.gx = Tensor::empty(x.shape(), x.dtype());
      T* gxp = static_cast<T*>(res.gx.raw_data());
      const T* rp = gres.defined() ? static_cast<const T*>(gres.raw_data()) : nullptr;
#pragma omp parallel for schedule(static) if (R * C > 16384)
      for (int64_t r = 0; r < R; ++r) {
        const T* xr = xp + r * C;
        const T* gr = gp + r * C;
        const A s = sp[r];
        double dot = 0;
        for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(load(gr[c]) * wv(c)) * (load(xr[c]) * s);
        const A m = static_cast<A>(dot / C);
        T* o = gxp + r * C;
        for (int64_t c = 0; c < C; ++c) o[c] = store<T>(s * (load(gr[c]) * wv(c) - load(xr[c]) * s * m));
        if (rp)
          for (int64_t c = 0; c < C; ++c) o[c] = store<T>(load(rp[r * C + c]) + load(o[c]));
      }
    }
    if (need_gw && wp) {
      // gw[c] = sum_r g[r, c] * x[r, c] * rstd[r]; column blocks, rows in order: deterministic
      res.gw = Tensor::empty({C}, w.dtype());
      W* gwp = static_cast<W*>(res.gw.raw_data());
      constexpr int64_t kCols = 64;
      const int64_t nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (R * C > 16384)
      for (int64_t blk = 0; blk < nblk; ++blk) {
        const int64_t c0 = blk * kCols, c1 = std::min(C, c0 + kCols);
        double acc[kCols] = {0};
        for (int64_t r = 0; r < R; ++r) {
          const A s = sp[r];
          for (int64_t c = c0; c < c1; ++c)
            acc[c - c0] += static_cast<double>(load(gp[r * C + c])) * (load(xp[r * C + c]) * s);
        }
        for (int64_t c = c0; c < c1; ++c) gwp[c] = store<W>(acc[c - c0]);
      }
    }
  });
  return res;
}

}  // namespace hz::cpu
