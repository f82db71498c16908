#include "cli/flags.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file.h"

namespace hz::cli {

std::string Flags::get(const std::string& k, const std::string& def) const {
  auto it = kv.find(k);
  return it == kv.end() ? def : it->second;
}

int64_t parse_int(const std::string& s, const std::string& what, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
  HZ_CHECK(!s.empty() && end && *end == '\0' && errno != ERANGE, ValueError, what, ": expected a whole number, got '", s,
           "'");
  HZ_CHECK(v >= lo && v <= hi, ValueError, what, " must be in [", lo, ", ", hi, "], got ", s);
  return v;
}

double parse_number(const std::string& s, const std::string& what, double lo, double hi) {
  char* end = nullptr;
  const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  HZ_CHECK(!s.empty() && end && *end == '\0', ValueError, what, ": expected a number, got '", s, "'");
  HZ_CHECK(std::isfinite(v) && v >= lo && v <= hi, ValueError, what, " must be a finite number in [", lo, ", ", hi,
           "], got ", s);
  return v;
}

int64_t Flags::geti(const std::string& k, int64_t def, int64_t lo, int64_t hi) const {
  return has(k) ? parse_int(get(k), "--" + k, lo, hi) : def;
}
double Flags::getd(const std::string& k, double def, double lo, double hi) const {
  return has(k) ? parse_number(get(k), "--" + k, lo, hi) : def;
}

std::string read_input_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  std::string text;  // a regular file (core/file.h)
  const std::string why = read_file_capped(path, static_cast<uint64_t>(max_bytes), text);
  HZ_CHECK(why.empty(), ValueError, what, ": '", path, "' ", why);
  return text;
}

Flags parse_flags(const std::vector<std::string>& a, const std::vector<std::string>& with_value,
                  const std::vector<std::string>& bare, size_t from) {
  Flags f;
  for (size_t i = from; i < a.size(); ++i) {
    const std::string& s = a[i];
    if (s.rfind("--", 0) == 0) {
      const std::string k = s.substr(2);
      if (std::find(bare.begin(), bare.end(), k) != bare.end()) {
        f.kv[k] = "1";
        continue;
      }
      HZ_CHECK(std::find(with_value.begin(), with_value.end(), k) != with_value.end(), ValueError,
               "unknown option ", s, "; see --help");
      HZ_CHECK(i + 1 < a.size(), ValueError, "option ", s, " needs a value");
      f.kv[k] = a[++i];
    } else {
      f.positional.push_back(s);
    }
  }
  return f;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace hz::cli
