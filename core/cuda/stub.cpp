// Horizon: the CUDA runtime in a CPU-only build (HZ_CUDA=OFF): no device, no backend table, and a
// DeviceError that says how to get a CUDA build where a device is asked for.
#include "core/cuda/runtime.h"

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
const Backend* backend_table() { return nullptr; }
std::string device_name(int) { no_cuda(); }
int64_t memory_bytes(int) { no_cuda(); }
int64_t memory_usable(int) { no_cuda(); }
int compute_capability(int) { no_cuda(); }
void* compute_stream(int) { no_cuda(); }
void* comm_stream(int) { no_cuda(); }
void synchronize(int) { no_cuda(); }
void* event_record(int) { no_cuda(); }
double event_elapsed_ms(void*, void*) { no_cuda(); }
void event_free(void*) {}
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
void throw_error(int, const char*, const char*, int) { no_cuda(); }
}  // namespace hz::cuda
