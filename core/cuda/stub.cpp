// Horizon: CUDA entry points for a CPU-only build (HZ_CUDA=OFF). Each throws a DeviceError
// that says how to get a CUDA build.
#include "core/cuda/backend.h"

namespace hz::cuda {
namespace {
[[noreturn]] void no_cuda() {
  throw DeviceError("this Horizon build has no CUDA support; reconfigure with -DHZ_CUDA=ON on a "
                    "machine with the CUDA toolkit");
}
}  // namespace
bool compiled() { return false; }
int device_count() { return 0; }
bool available() { return false; }
void* alloc(size_t, int) { no_cuda(); }
void free(void*, int) noexcept {}
void memcpy(void*, const void*, size_t, CopyKind, int) { no_cuda(); }
Tensor binary(BinaryOp, const Tensor&, const Tensor&) { no_cuda(); }
Tensor matmul(const Tensor&, const Tensor&, bool, bool, double, const Shape&) { no_cuda(); }
}  // namespace hz::cuda
