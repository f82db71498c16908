// Horizon: learning-rate schedules as a multiplier of the groups' base lr (Optimizer::step's
// lr_mult). Steps are 0-based: lr_multiplier(c, k) is the multiplier for the (k+1)-th update.
//
//   warmup (every kind): k < warmup_steps -> (k + 1) / warmup_steps   (the last warmup step is 1)
//   constant: 1 after warmup
//   cosine:   min + (1 - min) * (1 + cos(pi * p)) / 2, p = (k - warmup) / (total - warmup),
//             so 1 at k = warmup and min_ratio at k = total_steps (held there after)
//   wsd:      warmup, stable at 1, then linear cooldown over the last D = round(decay_fraction *
//             total_steps) steps: 1 - (1 - min) * (k - (total - D)) / D, reaching min_ratio at
//             k = total_steps (held there after); D = 0 means a drop to min_ratio at total_steps
#pragma once
#include <cstdint>
#include <string>

namespace hz::optim {

enum class ScheduleKind : uint8_t { Constant, Cosine, WSD, Count };
static_assert(static_cast<int>(ScheduleKind::Count) == 3, "update the name table in schedule.cpp");
const char* name(ScheduleKind k);                       // "constant", "cosine", "wsd"
ScheduleKind parse_schedule(const std::string& s);      // ValueError listing the names

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::Cosine;
  int64_t warmup_steps = 0;    // linear warmup length (0 = none)
  int64_t total_steps = 1000;  // where cosine / wsd reach min_ratio
  double min_ratio = 0.1;      // final multiplier, in [0, 1]
  double decay_fraction = 0.2; // wsd: fraction of total_steps spent in the cooldown, in [0, 1]
};

// Throws ValueError saying which field to change: total_steps <= 0, warmup_steps < 0 or
// > total_steps, min_ratio or decay_fraction outside [0, 1], or (wsd) warmup overlapping the
// cooldown (warmup_steps > total_steps - cooldown steps).
void validate(const ScheduleConfig& c);

// Validates c, and step >= 0.
double lr_multiplier(const ScheduleConfig& c, int64_t step);

}  // namespace hz::optim
