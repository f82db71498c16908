#include "cli/flags.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace hz::cli {

std::string Flags::get(const std::string& k, const std::string& def) const {
  auto it = kv.find(k);
  return it == kv.end() ? def : it->second;
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
