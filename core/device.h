// Horizon: the device API, as the layers above core/ may use it.
//
// Everything above core/ (autograd, attention, nn, optim, data, io, distributed, eval, train, cli)
// reaches a device through Tensor (core/tensor.h: placement, copies, memory statistics), the ops
// (core/ops.h) and the few functions below; the backends' own headers (core/cpu/*.h,
// core/cuda/*.h, *.cuh) are internal to core/. The one exception is kernel code that is itself
// backend code of an op defined elsewhere: the fused attention's CPU kernel
// (attention/fused_cpu.cpp) uses the CPU kernel helpers (core/cpu/loops.h, fast_math.h,
// kernels.h), and its CUDA kernels (attention/cuda/, dev/cuda/) use core/cuda/common.cuh.
// tests/layering.sh holds the tree to this rule.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hz {

namespace cpu {
int num_threads();  // the OpenMP threads the CPU kernels use (1 without OpenMP)

// The libraries behind the CPU's matrix products (core/cpu/matmul.cpp), chosen once per process:
// each chosen f32 GEMM is first checked against a double-precision reference.
struct GemmSetup {
  std::string f32;       // "oneDNN 2.6.3 sgemm (avx512_core_amx), checked"
  std::string bf16;      // "oneDNN 2.6.3 bf16 matmul (...)" or "widened to f32: ..."
  std::string openblas;  // OpenBLAS's kernel against the CPU's ISA ("" without OpenBLAS)
  std::string warning;   // what runs below the CPU's speed or failed its check ("" when nothing)
};
const GemmSetup& gemm_setup();
// Row-blocked products. BLAS kernels on AVX2 (oneDNN's and OpenBLAS's alike) round a row of C
// differently depending on how many rows they are given (their tail handling, their split of the
// rows among threads), so the product over the first 256 rows of a matrix can differ in the last
// bit from the same rows of the product over all of it. While a RowBlockedProducts object lives
// on the calling thread, the CPU's products compute C's rows in blocks of kGemmRowBlock from the
// first row: a row's bits then depend only on the block it falls in, and work split into chunks
// that start at multiples of kGemmRowBlock (the language-model head's loss and its evaluation)
// repeats the bits of the unchunked product. Outside such a scope a product is one library call
// (blocks cost up to 10-20% of a GEMM's speed at the model's shapes); other devices ignore it.
constexpr int64_t kGemmRowBlock = 256;
class RowBlockedProducts {
 public:
  RowBlockedProducts();
  ~RowBlockedProducts();
  RowBlockedProducts(const RowBlockedProducts&) = delete;
  RowBlockedProducts& operator=(const RowBlockedProducts&) = delete;
};
bool row_blocked_products();  // inside such a scope on this thread
// A square product of size n in dt (F32 or BF16) timed on all threads: GFLOP/s, best of a few.
double gemm_gflops(DType dt, int64_t n = 512);

// Denormal (subnormal) floats cost a microcode assist per operation on x86 cores, tens of times
// an ordinary multiply-add; a model whose activations, gradients or Adam moments underflow slows
// to a crawl. Flushing sets MXCSR's FTZ (results below FLT_MIN become 0) and DAZ (such inputs
// read as 0) on the calling thread and on every OpenMP thread (OpenBLAS's and oneDNN's included,
// which run on Horizon's OpenMP threads); training enables it unless run.flush_denormals is
// false. Values below 1.2e-38 then read as zero: IEEE results differ only there.
void set_flush_denormals(bool on);
bool flush_denormals();  // the calling thread's setting

// The OpenMP threads' waiting at the end of a parallel region, as configured for this process
// ("GOMP_SPINCOUNT=3000 (Horizon's default)", "OMP_WAIT_POLICY=PASSIVE (environment)").
std::string omp_wait();
// The machine's physical memory in bytes (0 when unknown): what a job that cannot fit is measured
// against before it allocates (a prompt of millions of tokens, `horizon generate`).
int64_t physical_memory();
// Lines describing the CPU runtime for `horizon info` and the training log: threads, the GEMM
// libraries (with measured GFLOP/s when measure), denormal flushing, OpenMP waiting.
std::vector<std::string> runtime_report(bool measure);
}  // namespace cpu

// The CUDA runtime. In a CPU-only build (HZ_CUDA=OFF) compiled() and available() are false and
// the functions that need a device throw hz::DeviceError saying how to get a CUDA build.
namespace cuda {
bool compiled();             // HZ_CUDA build?
int device_count();          // 0 when no driver/GPU (never throws)
bool available();            // compiled() && device_count() > 0
std::string device_name(int device);  // "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)"
int compute_capability(int device);    // 10 * major + minor: 90 on an H100/H200
int64_t memory_bytes(int device);      // the device's global memory
// What this process can still use there: the driver's free memory (other processes and the CUDA
// context already taken out) plus what Horizon's pool holds (its tensors, live or cached).
int64_t memory_usable(int device);
// Each device has a compute stream (every kernel, cuBLASLt call, copy and allocation of Horizon
// runs on it, in order) and a communication stream (NCCL collectives), both non-blocking with
// respect to the legacy default stream; as cudaStream_t behind void*, so that callers need no
// CUDA header. Created on first use.
void* compute_stream(int device);
void* comm_stream(int device);
// Waits on the host until the device's compute stream has finished its work.
void synchronize(int device);
// CUDA events for the profile: one recorded on device's compute stream now, the milliseconds between
// two (waiting for the second), and its release.
void* event_record(int device);
double event_elapsed_ms(void* first, void* second);
void event_free(void* e);
// TF32 for f32 GEMMs (off by default: f32 parity tests compare to the CPU).
void set_allow_tf32(bool on);
bool allow_tf32();
// A CUDA runtime error (its cudaError_t code) as a DeviceError naming the call, where it was made and
// what to do about it; HZ_CUDA_CHECK throws it, for CUDA code in any layer (its file includes the
// CUDA runtime header itself).
[[noreturn]] void throw_error(int code, const char* call, const char* file, int line);
}  // namespace cuda

#define HZ_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    const auto hz_e_ = (call);                                                                     \
    if (static_cast<int>(hz_e_) != 0) ::hz::cuda::throw_error(static_cast<int>(hz_e_), #call, __FILE__, __LINE__); \
  } while (0)

// ---- a per-op profile ------------------------------------------------------------------------------
// Between profile_begin() and profile_end(), every call through the backend tables and every scope
// named with a ProfileScope (the fused attention's kernels) is timed on its device: wall time on the
// CPU; on a GPU a pair of CUDA events on the compute stream around the kernels it launches, so the
// GPU's own time with nothing synchronised until profile_end. A call made inside another timed one
// (an op inside the attention's scope) is the outer one's time, so the rows add up to no more than
// the time profiled. For `horizon bench train --profile`: where a step's time goes, per kernel family.
struct ProfileRow {
  std::string name;    // the backend entry (matmul, rms_norm, ...) or the scope's name
  std::string device;  // cpu, cuda:0
  int64_t calls = 0;
  double ms = 0.0;     // summed over the calls
};
void profile_begin();
std::vector<ProfileRow> profile_end();  // waits for the devices' events; rows by time, longest first
bool profiling();
class ProfileScope {
 public:
  ProfileScope(const char* name, const Device& d);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  bool counted_ = false, outer_ = false;
  size_t slot_ = 0;
};

// The op calls made through the backend tables since the process started (every device; on a GPU
// each is one kernel launch or more; the attention kernels launch outside the tables, uncounted):
// `horizon bench train` reports them per step, the launches a fusion saves or a CUDA graph replays.
uint64_t backend_calls();

// Waits on the host until device d has finished the work queued on it. A GPU runs on after a call
// returns, so a timer reads this before it stops; on the CPU ops return finished (a no-op).
inline void synchronize(const Device& d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

}  // namespace hz
