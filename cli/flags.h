// Horizon: the command line of the subcommands: --flag value pairs, bare --flags, positional
// arguments (recipes, runs, key=value overrides), and the median of timings.
#pragma once
#include <climits>
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
  // The value of --k as a whole integer / finite number in [lo, hi], `def` when absent; anything else
  // ("1e3" for an integer, "inf", "99999999999999999999", trailing text) is a ValueError naming the flag.
  int64_t geti(const std::string& k, int64_t def, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  double getd(const std::string& k, double def, double lo = -1.7976931348623157e308, double hi = 1.7976931348623157e308) const;
};

// s as a whole decimal integer in [lo, hi] / a finite number in [lo, hi]; ValueError naming `what`.
int64_t parse_int(const std::string& s, const std::string& what, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
double parse_number(const std::string& s, const std::string& what, double lo = -1.7976931348623157e308,
                    double hi = 1.7976931348623157e308);

// The text of a file a user names on the command line (a prompt, token ids): a regular file of at
// most max_bytes, refused before it is read otherwise (/dev/zero would be read until memory ran out).
std::string read_input_file(const std::string& path, const std::string& what, int64_t max_bytes = int64_t{256} << 20);

// a[from..]: --k v for the flags in `with_value`, --k alone for those in `bare`, the rest
// positional; an unknown --flag or one without its value is refused (ValueError, "see --help").
Flags parse_flags(const std::vector<std::string>& a, const std::vector<std::string>& with_value,
                  const std::vector<std::string>& bare = {}, size_t from = 1);

// "a,b,c" -> {a, b, c}
std::vector<std::string> split_list(const std::string& s);

double median(std::vector<double> v);

}  // namespace hz::cli
