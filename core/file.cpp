#include "core/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <atomic>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace hz {

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  // a temporary of this process's own: two processes writing the same file (two runs preparing one
  // data cache side by side) each rename a whole file into place, and the last one stands
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
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

namespace {
constexpr const char* kJournal = "/.results.pending";
constexpr const char* kSetTmp = ".set.tmp";

void write_whole(const std::string& path, const std::string& content, const std::string& shown) {
  FILE* f = std::fopen(path.c_str(), "wb");
  HZ_CHECK(f != nullptr, Error, "cannot create '", path, "': ", std::strerror(errno),
           "; check that the directory exists and is writable");
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size() && std::fflush(f) == 0;
  const int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(path.c_str());
    throw Error(detail::concat_msg("writing '", shown, "' failed: ", std::strerror(err), "; is the disk full?"));
  }
}
}  // namespace

void finish_file_set(const std::string& dir) {
  std::string names;
  const std::string journal = dir + kJournal;
  if (::access(journal.c_str(), F_OK) != 0) return;
  if (const std::string why = read_file_capped(journal, 1 << 20, names); !why.empty())
    throw Error(detail::concat_msg("'", journal, "': ", why));
  size_t at = 0;
  while (at < names.size()) {
    size_t end = names.find('\n', at);
    if (end == std::string::npos) end = names.size();
    const std::string name = names.substr(at, end - at);
    at = end + 1;
    if (name.empty() || name.find('/') != std::string::npos) continue;
    const std::string tmp = dir + "/" + name + kSetTmp;
    if (std::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0 && errno != ENOENT)
      throw Error(detail::concat_msg("cannot rename '", tmp, "' into place: ", std::strerror(errno)));
  }
  std::remove((dir + kJournal).c_str());
}

void write_files_atomic(const std::string& dir, const FileSet& files) {
  finish_file_set(dir);  // an earlier writer's set first
  std::string names;
  try {
    for (const auto& [name, content] : files) {
      HZ_CHECK(!name.empty() && name.find('/') == std::string::npos && name.find('\n') == std::string::npos, Error,
               "write_files_atomic: '", name, "' is not a plain file name");
      write_whole(dir + "/" + name + kSetTmp, content, dir + "/" + name);
      names += name + "\n";
    }
  } catch (...) {
    for (const auto& [name, content] : files) std::remove((dir + "/" + name + kSetTmp).c_str());
    throw;
  }
  write_file_atomic(dir + kJournal, names);
  finish_file_set(dir);
}

// ---- reading inputs ----------------------------------------------------------------------------
namespace {
std::string not_regular(mode_t m) {
  if (S_ISDIR(m)) return "is a directory, not a file";
  const char* kind = S_ISFIFO(m)   ? "a FIFO (a named pipe)"
                     : S_ISSOCK(m) ? "a socket"
                     : S_ISCHR(m)  ? "a character device"
                     : S_ISBLK(m)  ? "a block device"
                                   : "not a file";
  return std::string("is ") + kind +
         ", not a regular file: refused (reading it could wait for a writer for ever or never end; give the file itself)";
}
}  // namespace

std::string input_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot open: ") + std::strerror(errno);
  return S_ISREG(st.st_mode) ? std::string() : not_regular(st.st_mode);
}

int open_input(const std::string& path, std::string& why) {
  why = input_problem(path);
  if (!why.empty()) return -1;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  const bool statted = ::fstat(fd, &st) == 0;
  if (!statted || !S_ISREG(st.st_mode)) {  // swapped for something else since the check
    why = statted ? not_regular(st.st_mode) : std::string("cannot stat: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::ifstream open_input_stream(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::ifstream();
  const std::string why = input_problem(path);
  HZ_CHECK(why.empty(), ValueError, "'", path, "': ", why);
  return std::ifstream(path, std::ios::binary);
}

std::string read_file_capped(const std::string& path, uint64_t max_bytes, std::string& out) {
  std::string why;
  const int fd = open_input(path, why);
  if (fd < 0) return why;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return "the file holds " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
           " this format allows; refused (corrupt, or not the file you meant)";
  }
  out.clear();
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::string("read error: ") + std::strerror(errno);
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {  // grown since the fstat
      why = "the file holds more than the " + std::to_string(max_bytes) + " bytes this format allows; refused";
      break;
    }
  }
  ::close(fd);
  return why;
}

}  // namespace hz
