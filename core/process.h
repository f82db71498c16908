// Horizon: the process's own memory as the kernel counts it (Linux /proc/self/status): what a user
// sees in top or /usr/bin/time, beside the tensors the allocators count (core/tensor.h). The memory
// plan (train/memory_plan.h) adds the part outside the tensors to its prediction.
#pragma once
#include <cstdint>

namespace hz {

int64_t resident_bytes();       // VmRSS: resident now; 0 where the kernel does not say
int64_t peak_resident_bytes();  // VmHWM: the most resident since the start or the last reset; 0 where unknown
void reset_peak_resident();     // VmHWM := VmRSS (Linux >= 4.0: /proc/self/clear_refs); no-op elsewhere

// What the process holds outside Horizon's tensors now: resident bytes less the CPU allocator's
// (live tensors and its cached blocks). Libraries and their buffers, the binary with its embedded
// corpus, mapped data shards that were read, thread stacks, the heap's own bookkeeping.
int64_t resident_outside_tensors();

}  // namespace hz
