// Horizon: the CPU backend table (core/backend.h) and host memory with usage statistics.
#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/cpu/kernels.h"

namespace hz {

namespace {
// Training frees and reallocates the same activation sizes every step. With glibc's defaults,
// blocks above the (dynamic) mmap threshold go back to the kernel and every new step page-faults
// them in again (measured: ~7% of a quickstart step). Keep them in the heap instead.
const bool g_malloc_tuned = [] {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest threshold glibc accepts on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();
std::atomic<int64_t> g_current{0}, g_peak{0}, g_allocs{0};
// the mapped (rounded) bytes of live large blocks, and their all-time high: the cache's bound
std::atomic<int64_t> g_large_live{0}, g_large_high{0};

// Blocks of 8 MiB and more are mapped from the kernel directly and, once freed, kept by size
// (rounded to 64 KiB, 2 MiB from 32 MiB on) and handed out again, like the CUDA pool: training frees
// and reallocates the same sizes every step, and a fresh mapping comes back zero-filled by the
// kernel page by page (measured: 15% of a GPT-2-124M bf16 step in page faults; the embedding
// gradient alone is 154 MB). A request takes a cached block of its size, or the smallest one at
// most 1.25x it. At most kMaxCached bytes are kept, and the cache is emptied before an allocation
// is refused. The cache never lets the process hold more than 12.5% above its all-time high of
// live large blocks (counted as mapped): a new block that would go past that first unmaps cached
// blocks (the largest first). Without the bound a phase with other sizes (an evaluation at other
// lengths after the steps) stacked its blocks on the steps' cached ones; without the slack a step
// whose sizes come and go kept evicting what its next phase needed.
// Below 8 MiB glibc's heap serves them (kept in it, see above). With everything below 32 MiB there,
// the arenas fragmented: a 124M model's step at T 8192 (25 MB activations) held 9.3 GB for 6.7 GiB
// of tensors, 7.2 GB now; with 1 MiB the bf16 step of the 124M shape at T 64 lost 15-25% to page
// faults on its 1-5 MB blocks, which the heap reuses without them.
constexpr size_t kLarge = size_t{8} << 20;
constexpr size_t kMaxCached = size_t{4} << 30;
size_t round_block(size_t n) {
  const size_t g = n >= (size_t{32} << 20) ? size_t{2} << 20 : size_t{64} << 10;
  return (n + g - 1) / g * g;
}
void* map_block(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
std::mutex g_cache_mu;
// rounded size -> free block. Never destroyed: a tensor freed during static destruction may still
// return its block here, and the cached blocks stay reachable (not "leaked") until the process ends.
std::multimap<size_t, void*>& g_cache = *new std::multimap<size_t, void*>();
std::atomic<int64_t> g_cached{0};
// the mapped size of every live large block (a cached block up to 1.25x the request may serve it)
std::unordered_map<void*, size_t>& g_mapped = *new std::unordered_map<void*, size_t>();

void trim_cache(size_t keep) {  // callers hold g_cache_mu
  while (!g_cache.empty() && static_cast<size_t>(g_cached.load()) > keep) {
    auto it = std::prev(g_cache.end());  // the largest first
    g_cached.fetch_sub(static_cast<int64_t>(it->first));
    munmap(it->second, it->first);
    g_cache.erase(it);
  }
}

void* cpu_alloc(size_t bytes, int) {
  const size_t n = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  if (n >= kLarge) {
    const size_t rounded = round_block(n);
    std::lock_guard<std::mutex> lock(g_cache_mu);
    size_t got = rounded;
    if (auto it = g_cache.lower_bound(rounded); it != g_cache.end() && it->first <= rounded / 4 * 5) {
      p = it->second;  // the same size, or the smallest cached block at most 1.25x it
      got = it->first;
      g_cache.erase(it);
      g_cached.fetch_sub(static_cast<int64_t>(got));
    } else {
      const int64_t after = g_large_live.load() + static_cast<int64_t>(rounded);
      const int64_t bound = std::max(g_large_high.load(), after) / 8 * 9;  // 12.5% slack: see above
      const int64_t room = bound - after;                                   // what the cache may keep
      if (g_cached.load() > room) trim_cache(static_cast<size_t>(std::max<int64_t>(room, 0)));
      p = map_block(rounded);
      if (!p) {
        trim_cache(0);
        p = map_block(rounded);
      }
      if (p) g_allocs.fetch_add(1);
    }
    if (p) {
      g_mapped[p] = got;
      const int64_t live = g_large_live.fetch_add(static_cast<int64_t>(got)) + static_cast<int64_t>(got);
      if (live > g_large_high.load()) g_large_high.store(live);  // under g_cache_mu
    }
  } else {
    p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    if (p) g_allocs.fetch_add(1);
  }
  HZ_CHECK(p != nullptr, Error, "out of host memory allocating ", bytes, " bytes");
  const int64_t now = g_current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}
void cpu_release(void* p, size_t bytes, int) {
  g_current.fetch_sub(static_cast<int64_t>(bytes));
  if (std::max<size_t>(bytes, 1) >= kLarge) {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    const auto it = g_mapped.find(p);
    const size_t size = it != g_mapped.end() ? it->second : round_block(bytes);
    if (it != g_mapped.end()) g_mapped.erase(it);
    g_large_live.fetch_sub(static_cast<int64_t>(size));
    g_cache.emplace(size, p);
    g_cached.fetch_add(static_cast<int64_t>(size));
    trim_cache(kMaxCached);
    return;
  }
  std::free(p);
}
void cpu_synchronize(int) {}
DeviceMemoryStats cpu_stats(int) {
  DeviceMemoryStats s;
  s.allocated = g_current.load();
  s.reserved = s.allocated + g_cached.load();
  s.peak = g_peak.load();
  s.device_allocs = g_allocs.load();
  return s;
}
void cpu_reset_peak(int) { g_peak.store(g_current.load()); }

Backend make_cpu_backend() {
  (void)g_malloc_tuned;
  Backend b{};
  b.name = "cpu";
  b.alloc = cpu_alloc;
  b.release = cpu_release;
  b.upload = nullptr;    // host memory: no transfers
  b.download = nullptr;
  b.synchronize = cpu_synchronize;
  b.memory_stats = cpu_stats;
  b.reset_peak = cpu_reset_peak;
  b.copy = cpu::copy_strided;
  b.fill = cpu::fill;
  b.random_fill = cpu::random_fill;
  b.unary = cpu::unary;
  b.unary_backward = cpu::unary_backward;
  b.binary = cpu::binary;
  b.scalar_op = cpu::scalar_op;
  b.add_inplace = cpu::add_inplace;
  b.axpby = cpu::axpby;
  b.swiglu = cpu::swiglu;
  b.swiglu_backward = cpu::swiglu_backward;
  b.reduce_dim = cpu::reduce_dim;
  b.cumsum = cpu::cumsum;
  b.reduce_all = cpu::reduce_all;
  b.sum_squares = cpu::sum_squares;
  b.scatter_dim = cpu::scatter_dim;
  b.matmul = cpu::matmul;
  b.softmax = cpu::softmax;
  b.softmax_backward = cpu::softmax_backward;
  b.embedding = cpu::embedding;
  b.embedding_backward = cpu::embedding_backward;
  b.cross_entropy = cpu::cross_entropy;
  b.cross_entropy_backward = cpu::cross_entropy_backward;
  b.cross_entropy_rows = cpu::cross_entropy_rows;
  b.rms_norm = cpu::rms_norm;
  b.rms_norm_backward = cpu::rms_norm_backward;
  b.rotary = cpu::rotary;
  b.rotate_angles = cpu::rotate_angles;
  b.rotate_angles_grad = cpu::rotate_angles_grad;
  b.adamw_update = cpu::adamw_update;
  b.adamw_multi_update = cpu::adamw_multi_update;
  b.momentum_update = cpu::momentum_update;
  return b;
}
}  // namespace

const Backend& cpu_backend() {
  static const Backend b = make_cpu_backend();  // built on first use: safe from any static initializer
  return b;
}

MemoryStats cpu_memory_stats() { return {g_current.load(), g_peak.load()}; }
void reset_cpu_peak_memory() { g_peak.store(g_current.load()); }

}  // namespace hz
