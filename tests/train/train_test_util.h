// Helpers shared by the train/ test files.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "train/memory_plan.h"
#include "train/trainer.h"

namespace hz::test {

// A fresh directory /tmp/<prefix>_XXXXXX (left in place for inspection after a failure).
inline std::string make_tmp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  return std::string(mkdtemp(tmpl.data()));
}

// The memory plan within 15% of a run's measured peak (the CPU allocator's or the CUDA pool's).
inline void expect_plan_holds_peak(const train::TrainResult& r, const std::string& what) {
  ASSERT_GT(r.mem_peak, 0) << what;
  const double ratio = static_cast<double>(r.mem_plan) / static_cast<double>(r.mem_peak);
  EXPECT_GT(ratio, 0.85) << what << "plan " << train::format_bytes(r.mem_plan) << " measured " << train::format_bytes(r.mem_peak);
  EXPECT_LT(ratio, 1.15) << what << "plan " << train::format_bytes(r.mem_plan) << " measured " << train::format_bytes(r.mem_peak);
}

}  // namespace hz::test
