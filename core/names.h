// Horizon: enums named by a table of strings (recipe choices, spec kinds, schedules). One parser for
// all of them, so every refusal reads the same: "unknown WHAT 'S'; expected one of: a b c".
#pragma once
#include <cstddef>
#include <string>

#include "core/error.h"

namespace hz {

template <class E, size_t N>
E parse_name(const std::string& s, const char* const (&names)[N], const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  std::string msg = std::string("unknown ") + what + " '" + s + "'; expected one of:";
  for (size_t i = 0; i < N; ++i) msg += std::string(" ") + names[i];
  throw ValueError(msg);
}

}  // namespace hz
