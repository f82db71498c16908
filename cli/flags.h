// Horizon: the command line of the subcommands: --flag value pairs, bare --flags, positional
// arguments (recipes, runs, key=value overrides), and the median of timings.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hz::cli {

struct Flags {
  std::map<std::string, std::string> kv;
  std::vector<std::string> positional;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& def = "") const;
  int64_t geti(const std::string& k, int64_t def) const { return std::stoll(get(k, std::to_string(def))); }
};

// a[from..]: --k v for the flags in `with_value`, --k alone for those in `bare`, the rest
// positional; an unknown --flag or one without its value is refused (ValueError, "see --help").
Flags parse_flags(const std::vector<std::string>& a, const std::vector<std::string>& with_value,
                  const std::vector<std::string>& bare = {}, size_t from = 1);

// "a,b,c" -> {a, b, c}
std::vector<std::string> split_list(const std::string& s);

double median(std::vector<double> v);

}  // namespace hz::cli
