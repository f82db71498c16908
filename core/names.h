// Horizon: enums named by a table of strings (recipe choices, spec kinds, schedules). One parser for
// all of them, so every refusal reads the same: "unknown WHAT 'S'; expected one of: a b c".
#pragma once
#include <cstddef>
#include <string>

#include "core/error.h"

namespace hz {

// The table must name every value of E (E::Count of them): checked at compile time.
template <class E, size_t N>
const char* enum_name(E e, const char* const (&names)[N]) {
  static_assert(N == static_cast<size_t>(E::Count), "the name table must name every value of the enum");
  return names[static_cast<size_t>(e)];
}

template <class E, size_t N>
E parse_name(const std::string& s, const char* const (&names)[N], const char* what) {
  static_assert(N == static_cast<size_t>(E::Count), "the name table must name every value of the enum");
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  std::string msg = std::string("unknown ") + what + " '" + s + "'; expected one of:";
  for (size_t i = 0; i < N; ++i) msg += std::string(" ") + names[i];
  throw ValueError(msg);
}

}  // namespace hz
