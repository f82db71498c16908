// Horizon CUDA kernels: embedding gather and its deterministic backward, RMSNorm forward and
// backward, the rotary rotation, and the optimizers' per-element updates.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

#include "core/cuda/common.cuh"
#include "core/cuda/kernels.cuh"
#include "core/multi_tensor.h"

namespace hz::cuda {

using math::load;
using math::store;

namespace {
// Throws when an id lies outside [0, V) (one host transfer: the count and the first bad position).
template <class I>
__global__ void check_ids_kernel(const I* __restrict__ ids, int64_t n, int64_t V, unsigned long long* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(ids[i]);
    if (v < 0 || v >= V) atomicMin(out, static_cast<unsigned long long>(i));  // integer: order-free
  }
}
void check_ids(const Tensor& ids, int64_t V) {
  const int64_t n = ids.numel();
  if (n == 0) return;
  const int dev = ids.device().index;
  Tensor flag = Tensor::full({1}, static_cast<double>(n), DType::I64, ids.device());
  dispatch_index(ids.dtype(), [&](auto tag) {
    using I = decltype(tag);
    check_ids_kernel<I><<<blocks_for(n), kThreads, 0, stream(dev)>>>(
        ptr<const I>(ids), n, V, reinterpret_cast<unsigned long long*>(flag.data<int64_t>()));
    HZ_CUDA_LAUNCHED("embedding id check");
  });
  const int64_t first = static_cast<int64_t>(flag.item());
  if (first < n) {
    const int64_t bad = static_cast<int64_t>(ids.reshape({-1}).at_flat(first));
    throw ValueError("embedding: id " + std::to_string(bad) + " at position " + std::to_string(first) +
                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
}

// out[i, :] = w[ids[i], :]; one block per token, threads over C.
template <class T, class I>
__global__ void embedding_kernel(const T* __restrict__ w, const I* __restrict__ ids, T* __restrict__ out, int64_t C) {
  const int64_t i = blockIdx.x;
  const T* src = w + static_cast<int64_t>(ids[i]) * C;
  T* dst = out + i * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

// Backward without float atomics: positions sorted by id (a stable radix sort keeps each id's
// positions in increasing order); the first position of each run of equal ids owns the output row
// and adds the run's gradient rows in that order. Columns are split over blockIdx.y.
template <class T, class A>
__global__ void embedding_bwd_kernel(const int64_t* __restrict__ sorted_ids, const int64_t* __restrict__ order,
                                     const T* __restrict__ g, A* __restrict__ out, int64_t n, int64_t C) {
  const int64_t s = blockIdx.x;
  if (s > 0 && sorted_ids[s] == sorted_ids[s - 1]) return;  // not the start of a run
  const int64_t id = sorted_ids[s];
  const int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  A acc = 0;
  for (int64_t k = s; k < n && sorted_ids[k] == id; ++k) acc += static_cast<A>(load(g[order[k] * C + c]));
  out[id * C + c] = acc;
}
__global__ void iota_kernel(int64_t* __restrict__ p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = i;
}
}  // namespace

Tensor embedding(const Tensor& weight_in, const Tensor& ids_in) {
  const Tensor w = weight_in.contiguous(), ids = ids_in.contiguous();
  const int64_t V = w.size(0), C = w.size(1), n = ids.numel();
  Shape os = ids.shape();
  os.push_back(C);
  Tensor out = Tensor::empty(os, w.dtype(), w.device());
  if (n == 0 || C == 0) return out;
  const int dev = w.device().index;
  use_device(dev);
  check_ids(ids, V);
  dispatch_dtype(w.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(ids.dtype(), [&](auto itag) {
      using I = decltype(itag);
      embedding_kernel<T, I><<<static_cast<unsigned>(n), 128, 0, stream(dev)>>>(ptr<const T>(w), ptr<const I>(ids),
                                                                                 ptr<T>(out), C);
      HZ_CUDA_LAUNCHED("embedding");
    });
  });
  return out;
}

Tensor embedding_backward(const Tensor& gout_in, const Tensor& ids_in, int64_t V) {
  const Tensor g = gout_in.contiguous();
  const Tensor ids = ids_in.to(DType::I64).contiguous().reshape({-1});
  const int64_t C = g.size(-1), n = ids.numel();
  Tensor out = Tensor::zeros({V, C}, acc_dtype(g.dtype()), g.device());
  if (n == 0 || C == 0) return out;
  const int dev = g.device().index;
  use_device(dev);
  check_ids(ids, V);
  // stable sort of (id, position)
  Tensor order_in = Tensor::empty({n}, DType::I64, g.device());
  iota_kernel<<<blocks_for(n), kThreads, 0, stream(dev)>>>(order_in.data<int64_t>(), n);
  HZ_CUDA_LAUNCHED("iota");
  Tensor keys_out = Tensor::empty({n}, DType::I64, g.device()), order = Tensor::empty({n}, DType::I64, g.device());
  int end_bit = 1;
  while (end_bit < 63 && (int64_t{1} << end_bit) < V) ++end_bit;
  size_t temp_bytes = 0;
  HZ_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids.data<int64_t>(), keys_out.data<int64_t>(),
                                                order_in.data<int64_t>(), order.data<int64_t>(), static_cast<int>(n), 0,
                                                end_bit, stream(dev)));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes / 4) + 1}, DType::F32, g.device());  // scratch bytes
  HZ_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, ids.data<int64_t>(), keys_out.data<int64_t>(),
                                                order_in.data<int64_t>(), order.data<int64_t>(), static_cast<int>(n), 0,
                                                end_bit, stream(dev)));
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((C + 127) / 128));
  dispatch_floating(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = math::acc_t<T>;
    embedding_bwd_kernel<T, A><<<grid, 128, 0, stream(dev)>>>(keys_out.data<int64_t>(), order.data<int64_t>(),
                                                              ptr<const T>(g), ptr<A>(out), n, C);
    HZ_CUDA_LAUNCHED("embedding_backward");
  });
  return out.dtype() == g.dtype() ? out : out.to(g.dtype());
}

// ---- RMSNorm ------------------------------------------------------------------------------------
// One block per row: sum of squares (in double, as on the CPU), rstd, y = x rstd w. With a residual
// `res`, the row is first h = x + res (rounded to T, written to h), and each thread norms the elements of
// h it wrote itself (read back from its own stores: no barrier needed). The row is read through h's
// own (writable) pointer then, never through x's: x and res are const __restrict__ and may be read
// through the read-only cache, which need not see this kernel's stores.
namespace {
template <class T, class W>
__global__ void rms_kernel(const T* __restrict__ x, const W* __restrict__ w, T* __restrict__ y,
                           math::acc_t<T>* __restrict__ rstd, int64_t C, double eps, const T* __restrict__ res,
                           T* __restrict__ h) {
  using A = math::acc_t<T>;
  __shared__ double sd[32];
  const T* xr = x + blockIdx.x * C;
  T* yr = y + blockIdx.x * C;
  T* hr = res ? h + blockIdx.x * C : nullptr;
  if (res) {
    const T* rr = res + blockIdx.x * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) hr[c] = store<T>(load(xr[c]) + load(rr[c]));
  }
  auto row = [&](int64_t c) { return hr ? load(hr[c]) : load(xr[c]); };
  double ss = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double v = static_cast<double>(row(c));
    ss += v * v;
  }
  ss = block_reduce(ss, sd);
  const A r = static_cast<A>(1.0 / ::sqrt(ss / static_cast<double>(C) + eps));
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    yr[c] = store<T>(row(c) * r * (w ? static_cast<A>(load(w[c])) : A(1)));
}

// gx = rstd * (gy - xhat * mean(gy * xhat)), gy = g * w, xhat = x * rstd; with gres, gres + gx (gx
// rounded to T first: ops::add of the two)
template <class T, class W>
__global__ void rms_bwd_x_kernel(const T* __restrict__ x, const W* __restrict__ w, const math::acc_t<T>* __restrict__ rstd,
                                 const T* __restrict__ g, T* __restrict__ gx, int64_t C, const T* __restrict__ gres) {
  using A = math::acc_t<T>;
  __shared__ double sd[32];
  const int64_t base = blockIdx.x * C;
  const A s = rstd[blockIdx.x];
  double dot = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A wc = w ? static_cast<A>(load(w[c])) : A(1);
    dot += static_cast<double>(load(g[base + c]) * wc) * static_cast<double>(load(x[base + c]) * s);
  }
  dot = block_reduce(dot, sd);
  const A m = static_cast<A>(dot / static_cast<double>(C));
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A wc = w ? static_cast<A>(load(w[c])) : A(1);
    const T d = store<T>(s * (load(g[base + c]) * wc - load(x[base + c]) * s * m));
    gx[base + c] = gres ? store<T>(load(gres[base + c]) + load(d)) : d;
  }
}

// gw[c] = sum_r g[r, c] x[r, c] rstd[r]: rows split into fixed chunks (partials (nchunks, C)),
// then the chunks summed in order.
constexpr int64_t kRowChunk = 256;
template <class T>
__global__ void rms_bwd_w_partial(const T* __restrict__ x, const math::acc_t<T>* __restrict__ rstd,
                                  const T* __restrict__ g, double* __restrict__ part, int64_t R, int64_t C,
                                  int64_t chunk) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(R, r0 + chunk);
  double acc = 0;
  for (int64_t r = r0; r < r1; ++r)
    acc += static_cast<double>(load(g[r * C + c])) * static_cast<double>(load(x[r * C + c]) * rstd[r]);
  part[blockIdx.y * C + c] = acc;
}
template <class W>
__global__ void rms_bwd_w_final(const double* __restrict__ part, W* __restrict__ gw, int64_t nchunks, int64_t C) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  double acc = 0;
  for (int64_t k = 0; k < nchunks; ++k) acc += part[k * C + c];
  gw[c] = store<W>(acc);
}

}  // namespace

ops::RmsNormResult rms_norm(const Tensor& x_in, const Tensor& w_in, double eps, const Tensor& residual) {
  const Tensor x = x_in.contiguous();
  const Tensor w = w_in.defined() ? w_in.contiguous() : Tensor();
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  ops::RmsNormResult res;
  res.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Shape rs = x.shape();
  rs.pop_back();
  res.rstd = Tensor::empty(rs, acc_dtype(x.dtype()), x.device());
  if (residual.defined()) res.sum = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (R == 0 || C == 0) return res;
  const int dev = x.device().index;
  use_device(dev);
  dispatch_x_w(x.dtype(), w.defined() ? w.dtype() : x.dtype(), [&](auto xt, auto wt) {
    using T = decltype(xt);
    using W = decltype(wt);
    rms_kernel<T, W><<<static_cast<unsigned>(R), kThreads, 0, stream(dev)>>>(
        ptr<const T>(x), w.defined() ? ptr<const W>(w) : nullptr, ptr<T>(res.y), ptr<math::acc_t<T>>(res.rstd), C, eps,
        residual.defined() ? ptr<const T>(residual) : nullptr, residual.defined() ? ptr<T>(res.sum) : nullptr);
    HZ_CUDA_LAUNCHED("rms_norm");
  });
  return res;
}

ops::RmsNormGrads rms_norm_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& rstd_in, const Tensor& g_in,
                                    bool need_gx, bool need_gw, const Tensor& gres) {
  const Tensor x = x_in.contiguous(), g = g_in.contiguous();
  const Tensor rstd = rstd_in.to(acc_dtype(x.dtype())).contiguous();
  const Tensor w = w_in.defined() ? w_in.contiguous() : Tensor();
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  ops::RmsNormGrads res;
  const int dev = x.device().index;
  use_device(dev);
  dispatch_x_w(x.dtype(), w.defined() ? w.dtype() : x.dtype(), [&](auto xt, auto wt) {
    using T = decltype(xt);
    using W = decltype(wt);
    using A = math::acc_t<T>;
    if (need_gx) {
      res.gx = Tensor::empty(x.shape(), x.dtype(), x.device());
      if (R > 0 && C > 0) {
        rms_bwd_x_kernel<T, W><<<static_cast<unsigned>(R), kThreads, 0, stream(dev)>>>(
            ptr<const T>(x), w.defined() ? ptr<const W>(w) : nullptr, ptr<const A>(rstd), ptr<const T>(g), ptr<T>(res.gx), C,
            gres.defined() ? ptr<const T>(gres) : nullptr);
        HZ_CUDA_LAUNCHED("rms_norm_backward x");
      }
    }
    if (need_gw && w.defined()) {
      res.gw = Tensor::empty({C}, w.dtype(), w.device());
      // rows per chunk: kRowChunk, or more where the chunks would pass gridDim.y's 65535
      const int64_t chunk = std::max<int64_t>(kRowChunk, (R + 65534) / 65535);
      const int64_t nchunks = std::max<int64_t>(1, (R + chunk - 1) / chunk);
      Tensor part = Tensor::zeros({nchunks, C}, DType::F64, x.device());
      if (R > 0 && C > 0) {
        const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads), static_cast<unsigned>(nchunks));
        rms_bwd_w_partial<T><<<grid, kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<const A>(rstd), ptr<const T>(g),
                                                                 part.data<double>(), R, C, chunk);
        HZ_CUDA_LAUNCHED("rms_norm_backward w partial");
      }
      if (C > 0) {
        rms_bwd_w_final<W><<<blocks_for(C), kThreads, 0, stream(dev)>>>(part.data<double>(), ptr<W>(res.gw), nchunks, C);
        HZ_CUDA_LAUNCHED("rms_norm_backward w");
      }
    }
  });
  return res;
}

// ---- rotary ---------------------------------------------------------------------------------------
namespace {
constexpr int kMaxHalf = 256;  // head dims up to 512
struct Freqs {
  double f[kMaxHalf];
};
// Pair m of one row (m, m + half) rotated by `angle` (minus it when inverse), times mscale: cos/sin in
// double (as the CPU's tables), applied in S's compute type. Both rotations below go through it.
template <class S>
__device__ __forceinline__ void rotate_pair(const S* xr, S* yr, int64_t m, int64_t half, double angle, double mscale,
                                            bool inverse) {
  using A = math::acc_t<S>;
  double sn, cs;
  ::sincos(angle, &sn, &cs);
  const A c = static_cast<A>(cs * mscale), s = static_cast<A>((inverse ? -sn : sn) * mscale);
  const A x1 = load(xr[m]), x2 = load(xr[m + half]);
  yr[m] = store<S>(x1 * c - x2 * s);
  yr[m + half] = store<S>(x1 * s + x2 * c);
}
// One thread per (row, pair): angle pos * f[m] in double, cos/sin in double (as the CPU table).
// Positions (T), or (B, T) when HT > 0 (H T rows per sequence).
template <class S, class I>
__global__ void rotary_kernel(const S* __restrict__ x, const I* __restrict__ pos, S* __restrict__ y, int64_t rows,
                              int64_t T, int64_t HT, int64_t half, Freqs fr, double mscale, bool inverse) {
  const int64_t total = rows * half;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < total;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = j / half, m = j % half, t = r % T;
    const double a = static_cast<double>(pos[HT > 0 ? (r / HT) * T + t : t]) * fr.f[m];
    rotate_pair(x + r * 2 * half, y + r * 2 * half, m, half, a, mscale, inverse);
  }
}
}  // namespace

Tensor rotary(const Tensor& x_in, const Tensor& positions_in, const RotaryParams& p) {
  const Tensor x = x_in.contiguous(), positions = positions_in.contiguous();
  const int64_t T = x.size(2), D = x.size(3), half = D / 2, rows = x.numel() / std::max<int64_t>(D, 1);
  HZ_CHECK(half <= kMaxHalf, NotImplementedError, "rotary on CUDA supports head dims up to ", 2 * kMaxHalf, ", got ", D);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0 || half == 0) return out;
  Freqs fr{};
  for (int64_t m = 0; m < half; ++m) fr.f[m] = p.inv_freq[m];
  const int dev = x.device().index;
  use_device(dev);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    auto launch = [&](auto itag) {
      using I = decltype(itag);
      rotary_kernel<S, I><<<blocks_for(rows * half), kThreads, 0, stream(dev)>>>(
          ptr<const S>(x), ptr<const I>(positions), ptr<S>(out), rows, T,
          positions.dim() == 2 ? x.size(1) * T : int64_t(0), half, fr, p.mscale, p.inverse);
      HZ_CUDA_LAUNCHED("rotary");
    };
    if (positions.dtype() == DType::F64) launch(double{});  // positions between integers
    else dispatch_index(positions.dtype(), launch);
  });
  return out;
}

// ---- rotation by given angles ---------------------------------------------------------------------
namespace {
// One thread per (row, pair): cos/sin of the angle in double (as the CPU), applied in S's compute type.
template <class S, class P>
__global__ void rotate_angles_kernel(const S* __restrict__ x, const P* __restrict__ ang, S* __restrict__ y, int64_t rows,
                                     int64_t H, int64_t T, int64_t half, int64_t Ba, int64_t G, double mscale,
                                     bool inverse) {
  const int64_t total = rows * half, per = H / G;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < total;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = j / half, m = j % half, b = r / (H * T), h = (r / T) % H, t = r % T;
    const double th = static_cast<double>(ang[(((Ba == 1 ? 0 : b) * G + h / per) * T + t) * half + m]);
    rotate_pair(x + r * 2 * half, y + r * 2 * half, m, half, th, mscale, inverse);
  }
}
// One thread per angle (b, g, t, m): the group's heads (and the batch when the angles are shared)
// summed in order in P (no atomics: deterministic).
template <class S, class P>
__global__ void rotate_angles_grad_kernel(const S* __restrict__ y, const S* __restrict__ gy, P* __restrict__ out,
                                          int64_t B, int64_t H, int64_t T, int64_t half, int64_t Ba, int64_t G,
                                          P sign) {
  const int64_t total = Ba * G * T * half, per = H / G;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < total;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = j % half, t = (j / half) % T, g = (j / (half * T)) % G, ba = j / (half * T * G);
    P acc = 0;
    for (int64_t b = (Ba == 1 ? 0 : ba); b < (Ba == 1 ? B : ba + 1); ++b)
      for (int64_t h = g * per; h < (g + 1) * per; ++h) {
        const int64_t row = ((b * H + h) * T + t) * 2 * half;
        acc += static_cast<P>(load(gy[row + m + half])) * static_cast<P>(load(y[row + m])) -
               static_cast<P>(load(gy[row + m])) * static_cast<P>(load(y[row + m + half]));
      }
    out[j] = sign * acc;
  }
}
template <class F>
void dispatch_angle_dtype(DType dt, F&& f) {
  if (dt == DType::F64) f(double{});
  else f(float{});
}
}  // namespace

Tensor rotate_angles(const Tensor& x_in, const Tensor& angles_in, double mscale, bool inverse) {
  const Tensor x = x_in.contiguous(), angles = angles_in.contiguous();
  const int64_t H = x.size(1), T = x.size(2), half = x.size(3) / 2, rows = x.numel() / std::max<int64_t>(2 * half, 1);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0 || half == 0) return out;
  const int dev = x.device().index;
  use_device(dev);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    dispatch_angle_dtype(angles.dtype(), [&](auto atag) {
      using P = decltype(atag);
      rotate_angles_kernel<S, P><<<blocks_for(rows * half), kThreads, 0, stream(dev)>>>(
          ptr<const S>(x), ptr<const P>(angles), ptr<S>(out), rows, H, T, half, angles.size(0), angles.size(1), mscale,
          inverse);
      HZ_CUDA_LAUNCHED("rotate_angles");
    });
  });
  return out;
}

Tensor rotate_angles_grad(const Tensor& y_in, const Tensor& gy_in, const Tensor& angles, bool inverse) {
  const Tensor y = y_in.contiguous(), gy = gy_in.contiguous();
  const int64_t B = y.size(0), H = y.size(1), T = y.size(2), half = y.size(3) / 2;
  Tensor out = Tensor::empty(angles.shape(), angles.dtype(), y.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const int dev = y.device().index;
  use_device(dev);
  dispatch_floating(y.dtype(), [&](auto tag) {
    using S = decltype(tag);
    dispatch_angle_dtype(angles.dtype(), [&](auto atag) {
      using P = decltype(atag);
      rotate_angles_grad_kernel<S, P><<<blocks_for(n), kThreads, 0, stream(dev)>>>(
          ptr<const S>(y), ptr<const S>(gy), ptr<P>(out), B, H, T, half, angles.size(0), angles.size(1),
          static_cast<P>(inverse ? -1 : 1));
      HZ_CUDA_LAUNCHED("rotate_angles_grad");
    });
  });
  return out;
}

// ---- optimizer updates ------------------------------------------------------------------------------
namespace {
template <class T>
__global__ void adamw_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v, int64_t n,
                             math::AdamWCoef c) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    math::adamw_element(p[i], g[i], m[i], v[i], c);
}
// The multi-tensor table (core/multi_tensor.h) as the kernel's argument: block b, thread t.
template <class T>
__global__ void adamw_multi_kernel(const __grid_constant__ multi::AdamWBatch<T> batch, const math::AdamWCoef c) {
  multi::adamw_block(batch, c, blockIdx.x, threadIdx.x, blockDim.x);
}
template <class T>
__global__ void momentum_kernel(const T* __restrict__ g, T* __restrict__ b, T* __restrict__ u, int64_t n, double mu,
                                bool nesterov, double gscale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double gi = math::scaled_grad(g[i], gscale);
    b[i] = static_cast<T>(mu * static_cast<double>(b[i]) + (1.0 - mu) * gi);
    u[i] = nesterov ? static_cast<T>((1.0 - mu) * gi + mu * static_cast<double>(b[i])) : b[i];
  }
}
}  // namespace

void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const math::AdamWCoef& c) {
  const int64_t n = p.numel();
  if (n == 0) return;
  const int dev = p.device().index;
  use_device(dev);
  if (p.dtype() == DType::F32)
    adamw_kernel<float><<<blocks_for(n), kThreads, 0, stream(dev)>>>(p.data<float>(), g.data<float>(), m.data<float>(),
                                                                     v.data<float>(), n, c);
  else
    adamw_kernel<double><<<blocks_for(n), kThreads, 0, stream(dev)>>>(p.data<double>(), g.data<double>(),
                                                                      m.data<double>(), v.data<double>(), n, c);
  HZ_CUDA_LAUNCHED("adamw_update");
}

void adamw_multi_update(std::vector<ops::AdamWSlot>& slots, const math::AdamWCoef& c) {
  const int dev = slots.front().p.device().index;
  use_device(dev);
  std::vector<multi::AdamWTensor> ts;
  for (ops::AdamWSlot& s : slots)
    ts.push_back({s.p.raw_data(), s.g.raw_data(), s.m.raw_data(), s.v.raw_data(), s.p.numel(), s.lr, s.decay});
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    for (const multi::AdamWBatch<T>& b : multi::adamw_batches<T>(ts)) {
      adamw_multi_kernel<T><<<static_cast<unsigned>(b.blocks()), kThreads, 0, stream(dev)>>>(b, c);
      HZ_CUDA_LAUNCHED("adamw_multi_update");
    }
  };
  if (slots.front().p.dtype() == DType::F32) launch(float{});
  else launch(double{});
}

void momentum_update(const Tensor& g, Tensor& buf, Tensor& out, double mu, bool nesterov, double gscale) {
  const int64_t n = buf.numel();
  if (n == 0) return;
  const int dev = buf.device().index;
  use_device(dev);
  if (buf.dtype() == DType::F32)
    momentum_kernel<float><<<blocks_for(n), kThreads, 0, stream(dev)>>>(g.data<float>(), buf.data<float>(),
                                                                        out.data<float>(), n, mu, nesterov, gscale);
  else
    momentum_kernel<double><<<blocks_for(n), kThreads, 0, stream(dev)>>>(g.data<double>(), buf.data<double>(),
                                                                         out.data<double>(), n, mu, nesterov, gscale);
  HZ_CUDA_LAUNCHED("momentum_update");
}

}  // namespace hz::cuda
