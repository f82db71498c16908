// Horizon: the fields of a configuration table (the recipe, train/recipe_fields.h; an attention layer
// kind's fields, attention/spec_fields.h), each with its documentation, its role and, for numbers
// (and each element of a list of numbers), its range. A table is a function over a visitor that
// reads, writes, checks or documents every field the same way.
#pragma once
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace hz {

// Each field carries a Field: its documentation, its role and, for numbers (and each element of
// a list of numbers), its range. Numbers are finite; an integer field without an upper bound takes at
// most kIntCeiling (2^40: no count, size or step Horizon handles comes near, and products of two such
// fields stay far from int64 overflow).
//   architecture    what the weights were trained as: a checkpoint's own; evaluation and resume
//                   refuse to change it (surgery recipes change it on purpose: DroPE, SWAN)
//   inference-time  how a trained model is run (RoPE scalings, freeze_scopes, eval.*): free to change
//   run             how the run trains, where it writes (free to change)
enum class Role : uint8_t { Architecture, Inference, Run };
inline const char* role_name(Role r) {
  return r == Role::Architecture ? "architecture" : r == Role::Inference ? "inference-time" : "run";
}

constexpr double kIntCeiling = 1099511627776.0;  // 2^40

struct Field {
  const char* doc;
  Role role;
  double lo = -HUGE_VAL, hi = HUGE_VAL;
  bool lo_open = false, hi_open = false;
  Field at_least(double v) const { Field f = *this; f.lo = v; return f; }
  Field at_most(double v) const { Field f = *this; f.hi = v; return f; }
  Field above(double v) const { Field f = *this; f.lo = v; f.lo_open = true; return f; }
  Field in(double a, double b, bool open_hi = false) const {
    Field f = *this;
    f.lo = a;
    f.hi = b;
    f.hi_open = open_hi;
    return f;
  }
  bool bounded() const { return lo != -HUGE_VAL || hi != HUGE_VAL; }
  // Every number is finite (an infinity passes no field's check: `optim.eps: .inf` used to pass "> 0").
  bool contains(double x) const {
    if (!std::isfinite(x)) return false;
    return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  }
  static std::string num(double x) {
    if (x == std::floor(x) && std::fabs(x) < 9.2e18) return std::to_string(static_cast<int64_t>(x));  // 16777216, not 1.67772e+07
    std::ostringstream s;
    s << x;
    return s.str();
  }
  // ">= 1", "> 0", "in [0, 1)"; "" when unbounded
  std::string range() const {
    if (!bounded()) return "";
    if (hi == HUGE_VAL) return (lo_open ? "> " : ">= ") + num(lo);
    if (lo == -HUGE_VAL) return (hi_open ? "< " : "<= ") + num(hi);
    return std::string("in ") + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
  }
};
inline Field arch(const char* d) { return {d, Role::Architecture}; }
inline Field infer(const char* d) { return {d, Role::Inference}; }
inline Field run_opt(const char* d) { return {d, Role::Run}; }

}  // namespace hz
