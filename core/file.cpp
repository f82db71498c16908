#include "core/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace hz {

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  HZ_CHECK(f != nullptr, Error, "cannot create '", tmp, "': ", std::strerror(errno),
           "; check that the directory exists and is writable");
  bool written = true;
  for (std::string_view p : parts) written = written && std::fwrite(p.data(), 1, p.size(), f) == p.size();
  written = written && std::fflush(f) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int e = written ? errno : err;
    std::remove(tmp.c_str());
    throw Error(detail::concat_msg("writing '", path, "' failed: ", std::strerror(e), "; is the disk full?"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error(detail::concat_msg("cannot rename '", tmp, "' to '", path, "': ", std::strerror(e)));
  }
}

}  // namespace hz
