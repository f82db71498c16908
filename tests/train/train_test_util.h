// Helpers shared by the train/ test files.
#pragma once
#include <stdlib.h>

#include <string>

namespace hz::test {

// A fresh directory /tmp/<prefix>_XXXXXX (left in place for inspection after a failure).
inline std::string make_tmp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  return std::string(mkdtemp(tmpl.data()));
}

}  // namespace hz::test
