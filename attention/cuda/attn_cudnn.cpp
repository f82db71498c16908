// Horizon: cuDNN's fused attention for the calls attention/backend.h routes to it. cudnn-frontend's
// SDPA graphs, forward (with the rows' log-sum-exp, "Stats") and backward (from it), built once per
// device, shape and graph description and kept; learned sinks with their gradient.
//
// Legend: B batch, H query heads, Hkv key/value heads, Tq queries, Tk keys, D head dim.
//   q (B, H, Tq, D), k / v (B, Hkv, Tk, D), out / gout / dq (B, H, Tq, D), dk / dv (B, Hkv, Tk, D):
//   bf16, contiguous; lse (B, H, Tq) f32, the natural log-sum-exp of the scaled logits (cuDNN's
//   Stats, the sink's exp(z_h) in its sum); sink / dsink (H) f32.
// The backward is asked for cuDNN's deterministic algorithm: Horizon's attention repeats bit for bit
// (attention/fused.h), and so do these calls.
//
// libcudnn is opened on first use through the frontend's dynamic loading (as cuBLASLt is,
// core/cuda/runtime.cu): the build needs the frontend's headers (scripts/tools/cudnn_frontend.sh)
// and the toolkit's cudnn.h, and a process that never runs a cuDNN call never loads it.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cudnn_frontend.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "attention/backend.h"
#include "attention/fused_kernels.h"
#include "core/device.h"
#include "core/error.h"

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading reads libcudnn's symbols from here
}

namespace hz::attn::detail {

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSink, kDO, kDQ, kDK, kDV, kDSink };

std::mutex g_mu;
std::string g_version;

void open_cudnn() {  // under g_mu
  if (fe::cudnn_dlhandle) return;
  std::string tried;
  for (const char* name : {HZ_CUDNN_PATH, HZ_CUDNN_SONAME}) {
    fe::cudnn_dlhandle = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (fe::cudnn_dlhandle) break;
    const char* why = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + name + ": " + (why ? why : "not found");
  }
  HZ_CHECK(fe::cudnn_dlhandle, DeviceError, "cannot open cuDNN (", tried,
           "): install cuDNN 9 or add its lib folder to LD_LIBRARY_PATH, or run with run.attention_backend: horizon");
  const size_t v = fe::detail::get_backend_version();
  g_version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  HZ_CHECK(v >= 91300, DeviceError, "cuDNN ", g_version,
           " is older than 9.13, the first with learned sinks in fused attention; install a newer cuDNN or run with "
           "run.attention_backend: horizon");
}

void check(const fe::error_t& e, const char* what) {
  HZ_CHECK(e.is_good(), DeviceError, "cuDNN fused attention: ", what, " failed: ", e.err_msg,
           " (run.attention_backend: horizon runs Horizon's kernels instead)");
}

cudnnHandle_t handle_for(int dev) {  // under g_mu
  static std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  HZ_CHECK(cudaSetDevice(dev) == cudaSuccess, DeviceError, "cuDNN: cannot select CUDA device ", dev);
  cudnnHandle_t h = nullptr;
  HZ_CHECK(fe::detail::create_handle(&h) == CUDNN_STATUS_SUCCESS, DeviceError, "cuDNN: cannot create a handle on device ", dev);
  HZ_CHECK(fe::detail::set_stream(h, static_cast<cudaStream_t>(cuda::compute_stream(dev))) == CUDNN_STATUS_SUCCESS,
           DeviceError, "cuDNN: cannot set the compute stream of device ", dev);
  handles[dev] = h;
  return h;
}

using Dims = std::vector<int64_t>;
Dims bhsd_strides(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, int64_t uid, Dims dims,
                                                     bool f32 = false) {
  auto a = fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(bhsd_strides(dims));
  if (f32) a.set_data_type(fe::DataType_t::FLOAT);
  return g.tensor(a);
}

// The mask, ALiBi and scale every graph of the call shares (backend.h: what cuDNN is told).
template <class Attrs>
void describe_to(Attrs& o, const CudnnGraphDesc& g) {
  o.set_attn_scale(static_cast<float>(g.attn_scale));
  o.set_diagonal_alignment(g.bottom_right ? fe::DiagonalAlignment_t::BOTTOM_RIGHT : fe::DiagonalAlignment_t::TOP_LEFT);
  o.set_diagonal_band_right_bound(0);  // causal: t = p_i - j >= 0
  if (g.window > 0) o.set_diagonal_band_left_bound(static_cast<int>(g.window));  // t < W
  if (g.alibi) o.set_alibi_mask(true);
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool,
                       bool, double>;
Key key_of(int dev, bool backward, const AttnKernelParams& P, const CudnnGraphDesc& g) {
  return {dev, backward, P.B, P.H, P.Hkv, P.Tq, P.Tk, P.D, g.window, g.bottom_right, g.alibi, g.sink, g.gqa,
          g.attn_scale};
}

void finish(Built& b, cudnnHandle_t h) {
  check(b.graph->validate(), "validating the graph");
  check(b.graph->build_operation_graph(h), "building the operation graph");
  check(b.graph->create_execution_plans({fe::HeurMode_t::A}), "choosing execution plans");
  check(b.graph->check_support(h), "checking support");
  check(b.graph->build_plans(h), "building the plans");
  check(b.graph->get_workspace_size(b.workspace), "sizing the workspace");
}

// A graph in bf16 with f32 softmax and accumulation, and its q, k, v inputs.
Built new_graph() {
  Built b;
  b.graph = std::make_shared<fe::graph::Graph>();
  b.graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return b;
}
auto qkv(fe::graph::Graph& G, const AttnKernelParams& P) {
  return std::make_tuple(tensor(G, "q", kQ, {P.B, P.H, P.Tq, P.D}), tensor(G, "k", kK, {P.B, P.Hkv, P.Tk, P.D}),
                         tensor(G, "v", kV, {P.B, P.Hkv, P.Tk, P.D}));
}

Built build_forward(const AttnKernelParams& P, const CudnnGraphDesc& g, cudnnHandle_t h) {
  Built b = new_graph();
  fe::graph::Graph& G = *b.graph;
  auto [Q, K, V] = qkv(G, P);
  auto o = fe::graph::SDPA_attributes().set_name("horizon_attention").set_generate_stats(true);
  describe_to(o, g);
  if (g.sink) o.set_sink_token(tensor(G, "sink", kSink, {1, P.H, 1, 1}, true));
  auto [O, Stats] = G.sdpa(Q, K, V, o);
  O->set_output(true).set_uid(kO).set_dim({P.B, P.H, P.Tq, P.D}).set_stride(bhsd_strides({P.B, P.H, P.Tq, P.D}));
  Stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({P.B, P.H, P.Tq, 1})
      .set_stride({P.H * P.Tq, P.Tq, 1, 1});
  finish(b, h);
  return b;
}

Built build_backward(const AttnKernelParams& P, const CudnnGraphDesc& g, cudnnHandle_t h) {
  Built b = new_graph();
  fe::graph::Graph& G = *b.graph;
  auto [Q, K, V] = qkv(G, P);
  auto O = tensor(G, "o", kO, {P.B, P.H, P.Tq, P.D});
  auto dO = tensor(G, "do", kDO, {P.B, P.H, P.Tq, P.D});
  auto Stats = tensor(G, "stats", kStats, {P.B, P.H, P.Tq, 1}, true);
  auto o = fe::graph::SDPA_backward_attributes().set_name("horizon_attention_backward").set_deterministic_algorithm(true);
  describe_to(o, g);
  if (g.sink) {
    o.set_sink_token(tensor(G, "sink", kSink, {1, P.H, 1, 1}, true));
    o.set_dsink_token(tensor(G, "dsink", kDSink, {1, P.H, 1, 1}, true));
  }
  auto [dQ, dK, dV] = G.sdpa_backward(Q, K, V, O, dO, Stats, o);
  dQ->set_output(true).set_uid(kDQ).set_dim({P.B, P.H, P.Tq, P.D}).set_stride(bhsd_strides({P.B, P.H, P.Tq, P.D}));
  dK->set_output(true).set_uid(kDK).set_dim({P.B, P.Hkv, P.Tk, P.D}).set_stride(bhsd_strides({P.B, P.Hkv, P.Tk, P.D}));
  dV->set_output(true).set_uid(kDV).set_dim({P.B, P.Hkv, P.Tk, P.D}).set_stride(bhsd_strides({P.B, P.Hkv, P.Tk, P.D}));
  finish(b, h);
  return b;
}

// The graph for (device, direction, shapes, description), built on first use; its handle.
std::pair<const Built*, cudnnHandle_t> graph_for(int dev, bool backward, const AttnKernelParams& P, const CudnnGraphDesc& g) {
  static std::map<Key, Built> cache;
  std::lock_guard<std::mutex> lock(g_mu);
  open_cudnn();
  cudnnHandle_t h = handle_for(dev);
  const Key k = key_of(dev, backward, P, g);
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, backward ? build_backward(P, g, h) : build_forward(P, g, h)).first;
  return {&it->second, h};
}

void run(int dev, const Built& b, cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack) {
  Tensor ws;  // stream-ordered from the device's pool (core/cuda), freed after the call is queued
  if (b.workspace > 0) ws = Tensor::empty({(b.workspace + 7) / 8}, DType::I64, Device::cuda(dev));
  check(b.graph->execute(h, pack, b.workspace > 0 ? ws.raw_data() : nullptr), "executing");
}

}  // namespace

bool cudnn_compiled() { return true; }

std::string cudnn_version() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_version;
}

void cudnn_forward(const AttnKernelParams& P, const CudnnGraphDesc& g, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& sink, Tensor& out, Tensor& lse) {
  const int dev = q.device().index;
  auto [b, h] = graph_for(dev, false, P, g);
  std::unordered_map<int64_t, void*> pack{{kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, v.raw_data()},
                                          {kO, out.raw_data()}, {kStats, lse.raw_data()}};
  if (g.sink) pack[kSink] = sink.raw_data();
  run(dev, *b, h, pack);
}

void cudnn_backward(const AttnKernelParams& P, const CudnnGraphDesc& g, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& sink,
                    Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dsink) {
  const int dev = q.device().index;
  auto [b, h] = graph_for(dev, true, P, g);
  std::unordered_map<int64_t, void*> pack{{kQ, q.raw_data()},     {kK, k.raw_data()},     {kV, v.raw_data()},
                                          {kO, out.raw_data()},   {kDO, gout.raw_data()}, {kStats, lse.raw_data()},
                                          {kDQ, dq.raw_data()},   {kDK, dk.raw_data()},   {kDV, dv.raw_data()}};
  if (g.sink) {
    pack[kSink] = sink.raw_data();
    HZ_CHECK(dsink != nullptr, ValueError, "cudnn_backward: a sink needs its gradient's tensor");
    pack[kDSink] = dsink->raw_data();
  }
  run(dev, *b, h, pack);
}

}  // namespace hz::attn::detail
