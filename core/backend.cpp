// Horizon: backend lookup by device.
#include "core/backend.h"

#include "core/cuda/runtime.h"
#include "core/device.h"

namespace hz {

const Backend& backend(Device d) {
  if (d.is_cpu()) return cpu_backend();
  const Backend* b = cuda::backend_table();
  HZ_CHECK(b != nullptr, DeviceError, "this Horizon build has no CUDA support; reconfigure with -DHZ_CUDA=ON "
           "on a machine with the CUDA toolkit (a GPU is needed only to run it)");
  return *b;
}

namespace detail {
std::atomic<uint64_t> backend_call_count{0};
void missing_entry(const char* entry, Device d) {
  throw NotImplementedError(std::string("op '") + entry + "' is not implemented on " + d.str() +
                            " (backend '" + backend(d).name + "'); move the tensors to the CPU with .to(Device::cpu())");
}
}  // namespace detail

uint64_t backend_calls() { return detail::backend_call_count.load(std::memory_order_relaxed); }

}  // namespace hz
