// Horizon CPU kernels: embedding gather / scatter-add, RMSNorm forward and backward.
#include <cmath>
#include <vector>

#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"

namespace hz::cpu {

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
  dispatch_float(w.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); dispatch_index(ids.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    const I* ip = ids.data<I>();
    check_ids(ip, n, V);
    const T* wp = w.data<T>();
    T* op_ = out.data<T>();
#pragma omp parallel for schedule(static) if (n * C > 32768)
    for (int64_t i = 0; i < n; ++i) std::copy(wp + ip[i] * C, wp + (ip[i] + 1) * C, op_ + i * C);
  }); });
  return out;
}

Tensor embedding_backward(const Tensor& gout_in, const Tensor& ids_in, int64_t V) {
  const Tensor g = gout_in.contiguous(), ids = ids_in.contiguous();
  const int64_t C = g.size(-1), n = ids.numel();
  Tensor out = Tensor::zeros({V, C}, g.dtype());
  dispatch_float(g.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); dispatch_index(ids.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    const I* ip = ids.data<I>();
    check_ids(ip, n, V);
    const T* gp = g.data<T>();
    T* op_ = out.data<T>();
    // Each thread owns a block of columns and adds the rows in order: deterministic.
    constexpr int64_t kCols = 64;
    const int64_t nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (n * C > 32768)
    for (int64_t blk = 0; blk < nblk; ++blk) {
      const int64_t c0 = blk * kCols, c1 = std::min(C, c0 + kCols);
      for (int64_t i = 0; i < n; ++i) {
        T* dst = op_ + ip[i] * C;
        const T* src = gp + i * C;
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
    }
  }); });
  return out;
}

ops::RmsNormResult rms_norm(const Tensor& x_in, const Tensor& w_in, double eps) {
  const Tensor x = x_in.contiguous();
  const Tensor w = w_in.defined() ? w_in.contiguous() : Tensor();
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  ops::RmsNormResult res;
  res.y = Tensor::empty(x.shape(), x.dtype());
  Shape rs = x.shape();
  rs.pop_back();
  res.rstd = Tensor::empty(rs, x.dtype());
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = x.data<T>();
    const T* wp = w.defined() ? w.data<T>() : nullptr;
    T* yp = res.y.data<T>();
    T* sp = res.rstd.data<T>();
#pragma omp parallel for schedule(static) if (R * C > 16384)
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = xp + r * C;
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
      const T rstd = static_cast<T>(1.0 / std::sqrt(ss / C + eps));
      sp[r] = rstd;
      T* yr = yp + r * C;
      if (wp) for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rstd * wp[c];
      else for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rstd;
    }
  });
  return res;
}

ops::RmsNormGrads rms_norm_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& rstd_in,
                                    const Tensor& g_in, bool need_gx, bool need_gw) {
  const Tensor x = x_in.contiguous(), rstd = rstd_in.contiguous(), g = g_in.contiguous();
  const Tensor w = w_in.defined() ? w_in.contiguous() : Tensor();
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  ops::RmsNormGrads res;
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = x.data<T>();
    const T* wp = w.defined() ? w.data<T>() : nullptr;
    const T* sp = rstd.data<T>();
    const T* gp = g.data<T>();
    if (need_gx) {
      // gx = rstd * (gy - xhat * mean(gy * xhat)), gy = g * w, xhat = x * rstd
      res.gx = Tensor::empty(x.shape(), x.dtype());
      T* gxp = res.gx.data<T>();
#pragma omp parallel for schedule(static) if (R * C > 16384)
      for (int64_t r = 0; r < R; ++r) {
        const T* xr = xp + r * C;
        const T* gr = gp + r * C;
        const T s = sp[r];
        double dot = 0;
        for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(gr[c] * (wp ? wp[c] : T(1))) * (xr[c] * s);
        const T m = static_cast<T>(dot / C);
        T* o = gxp + r * C;
        for (int64_t c = 0; c < C; ++c) o[c] = s * (gr[c] * (wp ? wp[c] : T(1)) - xr[c] * s * m);
      }
    }
    if (need_gw && wp) {
      // gw[c] = sum_r g[r, c] * x[r, c] * rstd[r]; column blocks, rows in order: deterministic
      res.gw = Tensor::empty({C}, x.dtype());
      T* gwp = res.gw.data<T>();
      constexpr int64_t kCols = 64;
      const int64_t nblk = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (R * C > 16384)
      for (int64_t blk = 0; blk < nblk; ++blk) {
        const int64_t c0 = blk * kCols, c1 = std::min(C, c0 + kCols);
        double acc[kCols] = {0};
        for (int64_t r = 0; r < R; ++r) {
          const T s = sp[r];
          for (int64_t c = c0; c < c1; ++c) acc[c - c0] += static_cast<double>(gp[r * C + c]) * (xp[r * C + c] * s);
        }
        for (int64_t c = c0; c < c1; ++c) gwp[c] = static_cast<T>(acc[c - c0]);
      }
    }
  });
  return res;
}

}  // namespace hz::cpu
