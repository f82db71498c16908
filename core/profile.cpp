// Horizon: the per-op profile (core/device.h): timed backend calls and named scopes, aggregated.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>

#include "core/backend.h"
#include "core/device.h"

namespace hz {

namespace detail {
std::atomic<bool> profile_on{false};
}  // namespace detail

namespace {
struct Record {
  const char* name;
  Device device;
  double t0 = 0, t1 = 0;               // CPU: milliseconds since profile_begin
  void* e0 = nullptr, *e1 = nullptr;  // CUDA: the events around the scope
};
std::mutex g_mu;
std::vector<Record> g_records;
std::chrono::steady_clock::time_point g_origin;
thread_local int t_depth = 0;  // timed scopes open on this thread

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - g_origin).count(); }
}  // namespace

void profile_begin() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Record& r : g_records) {
    cuda::event_free(r.e0);
    cuda::event_free(r.e1);
  }
  g_records.clear();
  g_origin = std::chrono::steady_clock::now();
  detail::profile_on = true;
}

bool profiling() { return detail::profile_on.load(std::memory_order_relaxed); }

ProfileScope::ProfileScope(const char* name, const Device& d) {
  if (!profiling()) return;
  counted_ = true;
  outer_ = t_depth++ == 0;
  if (!outer_) return;
  Record r{name, d};
  if (d.is_cuda()) r.e0 = cuda::event_record(d.index);
  else r.t0 = now_ms();
  std::lock_guard<std::mutex> lock(g_mu);
  slot_ = g_records.size();
  g_records.push_back(r);
}

ProfileScope::~ProfileScope() {
  if (!counted_) return;
  --t_depth;
  if (!outer_) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (slot_ >= g_records.size()) return;  // the profile ended (and was cleared) inside this scope
  Record& r = g_records[slot_];
  try {
    if (r.device.is_cuda()) r.e1 = cuda::event_record(r.device.index);
    else r.t1 = now_ms();
  } catch (...) {  // a destructor must not throw: the call's own error is what the caller sees
  }
}

std::vector<ProfileRow> profile_end() {
  detail::profile_on = false;
  std::lock_guard<std::mutex> lock(g_mu);
  std::map<std::pair<std::string, std::string>, ProfileRow> rows;
  for (Record& r : g_records) {
    double ms = 0;
    if (r.device.is_cuda()) {
      if (r.e0 && r.e1) ms = cuda::event_elapsed_ms(r.e0, r.e1);
      cuda::event_free(r.e0);
      cuda::event_free(r.e1);
      r.e0 = r.e1 = nullptr;
    } else {
      ms = std::max(0.0, r.t1 - r.t0);
    }
    ProfileRow& row = rows[{r.name, r.device.str()}];
    row.name = r.name;
    row.device = r.device.str();
    ++row.calls;
    row.ms += ms;
  }
  g_records.clear();
  std::vector<ProfileRow> out;
  for (auto& [k, row] : rows) out.push_back(row);
  std::stable_sort(out.begin(), out.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace hz
