// Horizon: the process's resident memory (see process.h).
#include "core/process.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/tensor.h"

namespace hz {
namespace {
int64_t status_kib(const char* key) {  // "VmRSS:\t  12345 kB"
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  int64_t kib = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      long long v = 0;
      if (std::sscanf(line + n + 1, "%lld", &v) == 1) kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}
}  // namespace

int64_t resident_bytes() { return status_kib("VmRSS"); }
int64_t peak_resident_bytes() { return status_kib("VmHWM"); }
void reset_peak_resident() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);  // 5: reset the peak resident set size (proc(5))
    std::fclose(f);
  }
}

int64_t resident_outside_tensors() {
  const int64_t rss = resident_bytes();
  if (rss == 0) return 0;
  return std::max<int64_t>(0, rss - memory_stats(Device::cpu()).reserved);
}

}  // namespace hz
