#include "optim/schedule.h"

#include <cmath>

#include "core/error.h"
#include "core/names.h"

namespace hz::optim {

namespace {
const char* const kSchedule[] = {"constant", "cosine", "wsd"};
static_assert(sizeof(kSchedule) / sizeof(*kSchedule) == static_cast<size_t>(ScheduleKind::Count));

int64_t cooldown_steps(const ScheduleConfig& c) {
  return static_cast<int64_t>(std::llround(c.decay_fraction * static_cast<double>(c.total_steps)));
}
}  // namespace

const char* name(ScheduleKind k) { return kSchedule[static_cast<int>(k)]; }

ScheduleKind parse_schedule(const std::string& s) { return parse_name<ScheduleKind>(s, kSchedule, "lr schedule"); }

void validate(const ScheduleConfig& c) {
  HZ_CHECK(c.kind < ScheduleKind::Count, ValueError,
           "schedule: invalid kind ", static_cast<int>(c.kind));
  HZ_CHECK(c.total_steps > 0, ValueError, "schedule: total_steps must be > 0, got ", c.total_steps);
  HZ_CHECK(c.warmup_steps >= 0, ValueError, "schedule: warmup_steps must be >= 0, got ",
           c.warmup_steps);
  HZ_CHECK(c.warmup_steps <= c.total_steps, ValueError, "schedule: warmup_steps (", c.warmup_steps,
           ") exceeds total_steps (", c.total_steps, "); shorten the warmup or train longer");
  HZ_CHECK(c.min_ratio >= 0.0 && c.min_ratio <= 1.0, ValueError,
           "schedule: min_ratio must lie in [0, 1], got ", c.min_ratio);
  HZ_CHECK(c.decay_fraction >= 0.0 && c.decay_fraction <= 1.0, ValueError,
           "schedule: decay_fraction must lie in [0, 1], got ", c.decay_fraction);
  if (c.kind == ScheduleKind::WSD) {
    const int64_t d = cooldown_steps(c);
    HZ_CHECK(c.warmup_steps <= c.total_steps - d, ValueError, "schedule: wsd warmup (",
             c.warmup_steps, " steps) overlaps the cooldown (last ", d, " of ", c.total_steps,
             " steps); lower warmup_steps or decay_fraction");
  }
}

double lr_multiplier(const ScheduleConfig& c, int64_t step) {
  validate(c);
  HZ_CHECK(step >= 0, ValueError, "lr_multiplier: step must be >= 0 (0-based), got ", step);
  if (step < c.warmup_steps)
    return static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  switch (c.kind) {
    case ScheduleKind::Constant:
      return 1.0;
    case ScheduleKind::Cosine: {
      const int64_t span = c.total_steps - c.warmup_steps;
      if (span <= 0 || step >= c.total_steps) return c.min_ratio;
      const double p = static_cast<double>(step - c.warmup_steps) / static_cast<double>(span);
      return c.min_ratio + (1.0 - c.min_ratio) * 0.5 * (1.0 + std::cos(M_PI * p));
    }
    case ScheduleKind::WSD: {
      const int64_t d = cooldown_steps(c);
      const int64_t start = c.total_steps - d;
      if (step >= c.total_steps) return c.min_ratio;
      if (step < start) return 1.0;
      const double p = static_cast<double>(step - start) / static_cast<double>(d);  // d > 0 here
      return 1.0 - (1.0 - c.min_ratio) * p;
    }
    case ScheduleKind::Count:
      break;
  }
  throw ValueError("lr_multiplier: invalid schedule kind");
}

}  // namespace hz::optim
