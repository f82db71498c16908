// Horizon CUDA runtime: devices, streams, the stream-ordered caching allocator, host transfers,
// cuBLASLt (opened on first use) and its handles, and error messages.
//
// Memory: one cudaMemPool per device (the device's default pool) with its release threshold set to
// "keep everything", so blocks freed with cudaFreeAsync return to the pool and are reused by the
// next cudaMallocAsync of the same stream without calling the driver. allocated/peak count live
// tensor bytes; reserved is the pool's reserved memory; device_allocs counts the times the pool had
// to grow (a training step in steady state adds none).
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include "core/cuda/common.cuh"

namespace hz::cuda {

// ---- errors ---------------------------------------------------------------------------------
const char* error_hint(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: lower data.batch_size (raise train.grad_accum to keep the batch), "
             "use run.precision=bf16, or a smaller model";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return "no usable GPU: check nvidia-smi, the driver version and CUDA_VISIBLE_DEVICES";
    case cudaErrorInvalidDevice:
      return "the device index does not exist: check CUDA_VISIBLE_DEVICES and the number of ranks per host";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
      return "a kernel faulted; the CUDA context is lost. Rerun the failing command under "
             "`compute-sanitizer --tool memcheck` to find the kernel, and report it";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "this binary was built for another GPU architecture: rebuild with -DCMAKE_CUDA_ARCHITECTURES=<your sm>";
    case cudaErrorInvalidConfiguration:
      return "a kernel launch configuration is invalid (a shape beyond the kernel's limits): report the shapes";
    default:
      return "see the CUDA error name; rerun with CUDA_LAUNCH_BLOCKING=1 to locate the failing call";
  }
}
const char* cublas_hint(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS could not start: check the driver and GPU memory";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS is out of GPU memory: lower the batch size";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "no cuBLASLt kernel for this dtype/layout combination: report the shapes and dtypes";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the GPU lacks a feature this GEMM needs (bf16 needs sm_80+)";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GEMM kernel failed to run: rerun under compute-sanitizer";
    default: return "see the cuBLAS status code";
  }
}
void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  const std::string msg = std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                          ") at " + file + ":" + std::to_string(line) + "; " + error_hint(e);
  cudaGetLastError();  // clear a non-sticky error so the process can report and continue
  throw DeviceError(msg);
}
void throw_error(int code, const char* call, const char* file, int line) {
  throw_cuda(static_cast<cudaError_t>(code), call, file, line);
}
void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  throw DeviceError(std::string(call) + " failed with cuBLAS status " + std::to_string(static_cast<int>(s)) + " at " +
                    file + ":" + std::to_string(line) + "; " + cublas_hint(s));
}

// ---- devices ------------------------------------------------------------------------------------
bool compiled() { return true; }
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the "no driver" error
    return 0;
  }
  return n;
}
bool available() { return device_count() > 0; }

const CublasLt& cublaslt() {
  static const CublasLt api = [] {
    std::string tried;
    void* lib = nullptr;
    for (const char* name : {HZ_CUBLASLT_PATH, HZ_CUBLASLT_SONAME}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      const char* why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + name + ": " + (why ? why : "not found");
    }
    HZ_CHECK(lib, DeviceError, "cannot open cuBLASLt (", tried,
             "): install the CUDA toolkit's cuBLAS or add its lib folder to LD_LIBRARY_PATH");
    auto sym = [&](const char* n) {
      void* f = dlsym(lib, n);
      HZ_CHECK(f, DeviceError, "cuBLASLt (", HZ_CUBLASLT_SONAME, ") has no ", n, ": a cuBLAS older than the build's");
      return f;
    };
    CublasLt a{};
    a.Create = reinterpret_cast<decltype(a.Create)>(sym("cublasLtCreate"));
    a.Matmul = reinterpret_cast<decltype(a.Matmul)>(sym("cublasLtMatmul"));
    a.MatmulAlgoGetHeuristic = reinterpret_cast<decltype(a.MatmulAlgoGetHeuristic)>(sym("cublasLtMatmulAlgoGetHeuristic"));
    a.MatmulDescCreate = reinterpret_cast<decltype(a.MatmulDescCreate)>(sym("cublasLtMatmulDescCreate"));
    a.MatmulDescSetAttribute = reinterpret_cast<decltype(a.MatmulDescSetAttribute)>(sym("cublasLtMatmulDescSetAttribute"));
    a.MatmulPreferenceCreate = reinterpret_cast<decltype(a.MatmulPreferenceCreate)>(sym("cublasLtMatmulPreferenceCreate"));
    a.MatmulPreferenceDestroy = reinterpret_cast<decltype(a.MatmulPreferenceDestroy)>(sym("cublasLtMatmulPreferenceDestroy"));
    a.MatmulPreferenceSetAttribute =
        reinterpret_cast<decltype(a.MatmulPreferenceSetAttribute)>(sym("cublasLtMatmulPreferenceSetAttribute"));
    a.MatrixLayoutCreate = reinterpret_cast<decltype(a.MatrixLayoutCreate)>(sym("cublasLtMatrixLayoutCreate"));
    a.MatrixLayoutSetAttribute = reinterpret_cast<decltype(a.MatrixLayoutSetAttribute)>(sym("cublasLtMatrixLayoutSetAttribute"));
    return a;
  }();
  return api;
}

namespace {
thread_local int t_current = -1;

struct DeviceState {
  std::once_flag once;
  cudaStream_t compute = nullptr, comm = nullptr;
  cudaMemPool_t pool = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::atomic<int64_t> allocated{0}, peak{0}, grows{0};
  std::atomic<uint64_t> last_reserved{0};
};
constexpr int kMaxDevices = 64;
DeviceState g_dev[kMaxDevices];

DeviceState& state(int device) {
  HZ_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "CUDA device index ", device, " out of range");
  DeviceState& s = g_dev[device];
  std::call_once(s.once, [&] {
    const int n = device_count();
    HZ_CHECK(device < n, DeviceError, "CUDA device ", device, " requested but ", n,
             " visible; no GPU or driver on this machine? (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    use_device(device);
    HZ_CUDA_CHECK(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
    HZ_CUDA_CHECK(cudaStreamCreateWithFlags(&s.comm, cudaStreamNonBlocking));
    HZ_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&s.pool, device));
    uint64_t keep = ~0ull;  // never return freed memory to the driver
    HZ_CUDA_CHECK(cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReleaseThreshold, &keep));
    HZ_CUBLAS_CHECK(cublaslt().Create(&s.lt));
  });
  return s;
}
}  // namespace

void use_device(int device) {
  if (t_current == device) return;
  HZ_CUDA_CHECK(cudaSetDevice(device));
  t_current = device;
}
cudaStream_t stream(int device) { return state(device).compute; }
void* compute_stream(int device) { return state(device).compute; }
void* comm_stream(int device) { return state(device).comm; }
cublasLtHandle_t lt_handle(int device) { return state(device).lt; }
void synchronize(int device) {
  use_device(device);
  HZ_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  HZ_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.totalGlobalMem >> 30) + " GiB)";
}

int64_t memory_bytes(int device) {
  cudaDeviceProp p{};
  HZ_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return static_cast<int64_t>(p.totalGlobalMem);
}

int64_t memory_usable(int device) {
  use_device(device);
  size_t free = 0, total = 0;
  HZ_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  uint64_t reserved = 0;
  HZ_CUDA_CHECK(cudaMemPoolGetAttribute(state(device).pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  return static_cast<int64_t>(free + reserved);
}

int compute_capability(int device) {
  int major = 0, minor = 0;
  HZ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  HZ_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return 10 * major + minor;
}

void* event_record(int device) {
  use_device(device);
  cudaEvent_t e = nullptr;
  HZ_CUDA_CHECK(cudaEventCreate(&e));
  HZ_CUDA_CHECK(cudaEventRecord(e, stream(device)));
  return e;
}
double event_elapsed_ms(void* first, void* second) {
  HZ_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(second)));
  float ms = 0.0f;
  HZ_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(first), static_cast<cudaEvent_t>(second)));
  return ms;
}
void event_free(void* e) {
  if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

namespace {
std::atomic<bool> g_tf32{false};
}
void set_allow_tf32(bool on) { g_tf32 = on; }
bool allow_tf32() { return g_tf32; }

// ---- memory ---------------------------------------------------------------------------------------
namespace {
void* cuda_alloc(size_t bytes, int device) {
  DeviceState& s = state(device);
  use_device(device);
  void* p = nullptr;
  HZ_CUDA_CHECK(cudaMallocAsync(&p, bytes < 1 ? 1 : bytes, s.compute));
  const int64_t now = s.allocated.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t pk = s.peak.load();
  while (now > pk && !s.peak.compare_exchange_weak(pk, now)) {
  }
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(s.pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess &&
      reserved > s.last_reserved.load()) {
    s.last_reserved = reserved;
    s.grows.fetch_add(1);
  }
  return p;
}
void cuda_release(void* p, size_t bytes, int device) {
  if (!p) return;
  DeviceState& s = g_dev[device];
  s.allocated.fetch_sub(static_cast<int64_t>(bytes));
  // never throws: at process exit the context may already be gone
  if (cudaSetDevice(device) == cudaSuccess) {
    t_current = device;
    if (cudaFreeAsync(p, s.compute) != cudaSuccess) cudaGetLastError();
  } else {
    cudaGetLastError();
  }
}
void cuda_upload(void* dst, const void* src, size_t bytes, int device) {
  use_device(device);
  // pageable source: the call returns once the bytes are staged, so `src` may be freed after it
  HZ_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream(device)));
}
void cuda_download(void* dst, const void* src, size_t bytes, int device) {
  use_device(device);
  HZ_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream(device)));
  HZ_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
}
void cuda_synchronize(int device) { synchronize(device); }
DeviceMemoryStats cuda_stats(int device) {
  DeviceState& s = state(device);
  DeviceMemoryStats r;
  r.allocated = s.allocated.load();
  r.peak = s.peak.load();
  uint64_t reserved = 0;
  HZ_CUDA_CHECK(cudaMemPoolGetAttribute(s.pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  r.reserved = static_cast<int64_t>(reserved);
  r.device_allocs = s.grows.load();
  return r;
}
void cuda_reset_peak(int device) {
  DeviceState& s = state(device);
  s.peak.store(s.allocated.load());
}
}  // namespace

void* lt_workspace(int device, size_t bytes) {
  DeviceState& s = state(device);
  if (s.workspace_bytes < bytes) {
    use_device(device);
    if (s.workspace) HZ_CUDA_CHECK(cudaFreeAsync(s.workspace, s.compute));
    HZ_CUDA_CHECK(cudaMallocAsync(&s.workspace, bytes, s.compute));
    s.workspace_bytes = bytes;
  }
  return s.workspace;
}

// ---- indexers -----------------------------------------------------------------------------------
template <int N>
Indexer<N> make_indexer(const Shape& shape, const Shape* const (&strides)[N]) {
  Indexer<N> ix;
  std::array<const Shape*, N> sts;
  for (int k = 0; k < N; ++k) sts[k] = strides[k];
  const MergedDims<N> md = merge_dims<N>(shape, sts);
  const std::vector<int64_t>& cs = md.size;
  const auto& cst = md.stride;
  HZ_CHECK(static_cast<int>(cs.size()) <= kMaxDims, NotImplementedError, "CUDA kernels address at most ", kMaxDims,
           " strided dims; this view needs ", cs.size(), " (make it contiguous first)");
  ix.nd = static_cast<int>(cs.size());
  ix.contiguous = ix.nd <= 1;
  for (int k = 0; k < N && ix.nd == 1; ++k) ix.contiguous &= cst[0][k] == 1;
  if (ix.nd == 0) ix.contiguous = true;
  for (int d = 0; d < ix.nd; ++d) {
    ix.size[d] = cs[d];
    for (int k = 0; k < N; ++k) ix.stride[k][d] = cst[d][k];
  }
  return ix;
}
template Indexer<1> make_indexer<1>(const Shape&, const Shape* const (&)[1]);
template Indexer<2> make_indexer<2>(const Shape&, const Shape* const (&)[2]);
template Indexer<3> make_indexer<3>(const Shape&, const Shape* const (&)[3]);

// the table (filled in backend.cu) reads these
void fill_runtime_entries(Backend& b) {
  b.alloc = cuda_alloc;
  b.release = cuda_release;
  b.upload = cuda_upload;
  b.download = cuda_download;
  b.synchronize = cuda_synchronize;
  b.memory_stats = cuda_stats;
  b.reset_peak = cuda_reset_peak;
}

}  // namespace hz::cuda
