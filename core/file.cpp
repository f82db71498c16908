#include "core/file.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <atomic>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace hz {

namespace {
// Why a write failed, in words a user can act on: RLIMIT_FSIZE (`ulimit -f`; SIGXFSZ is ignored at
// process start, so the write fails with EFBIG instead of killing the process) or a full disk.
std::string write_failure(const std::string& path, int err) {
  if (err == EFBIG)
    return detail::concat_msg("writing '", path, "' failed: ", std::strerror(err),
                              ": the file size limit (ulimit -f) is smaller than the file; raise it");
  return detail::concat_msg("writing '", path, "' failed: ", std::strerror(err), "; is the disk full?");
}
}  // namespace

namespace detail {
void (*on_file_synced)(const std::string& path) = nullptr;
}

namespace {
// fsync of a written file; false (errno set) when it fails.
bool sync_file(FILE* f, const std::string& path) {
  if (::fsync(::fileno(f)) != 0) return false;
  if (detail::on_file_synced) detail::on_file_synced(path);
  return true;
}
// fsync of a directory, so that the names created or renamed in it are on disk. Best effort: a
// file system that cannot sync a directory (EINVAL on some network and FUSE mounts) keeps its own rules.
void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  if (ok && detail::on_file_synced) detail::on_file_synced(dir.empty() ? "." : dir);
}
std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || h[0] == '\0') return "localhost";
  std::string s(h);
  for (char& c : s)
    if (c == '/') c = '_';
  return s;
}
// Temporaries of `path` (path.tmp.<host>.<pid>.<n>) that a writer on this host left when it was
// killed before it could remove them (SIGKILL, the OOM killer, a power cut): removed by the next
// writer of `path`. Another host's (a data cache on a shared file system) and a running process's
// stay.
void remove_stale_temporaries(const std::string& path, const std::string& host) {
  const std::string dir = dir_of(path);
  const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  const std::string prefix = base + ".tmp." + host + ".";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // <pid>.<n>
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (pid <= 0 || end == rest.c_str() || *end != '.') continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const auto& p : stale) std::remove(p.c_str());
}
}  // namespace

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  // a temporary of this process's own: two processes writing the same file (two runs preparing one
  // data cache side by side) each rename a whole file into place, and the last one stands
  static std::atomic<uint64_t> serial{0};
  static const std::string host = host_name();
  remove_stale_temporaries(path, host);
  const std::string tmp = path + ".tmp." + host + "." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  HZ_CHECK(f != nullptr, Error, "cannot create '", tmp, "': ", std::strerror(errno),
           "; check that the directory exists and is writable");
  bool written = true;
  for (std::string_view p : parts) written = written && std::fwrite(p.data(), 1, p.size(), f) == p.size();
  written = written && std::fflush(f) == 0 && sync_file(f, tmp);  // on disk before the rename makes it `path`
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int e = written ? errno : err;
    std::remove(tmp.c_str());
    throw Error(write_failure(path, e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error(detail::concat_msg("cannot rename '", tmp, "' to '", path, "': ", std::strerror(e)));
  }
  sync_dir(dir_of(path));  // the rename itself
}

namespace {
constexpr const char* kJournal = "/.results.pending";
constexpr const char* kSetTmp = ".set.tmp";

void write_whole(const std::string& path, const std::string& content, const std::string& shown) {
  FILE* f = std::fopen(path.c_str(), "wb");
  HZ_CHECK(f != nullptr, Error, "cannot create '", path, "': ", std::strerror(errno),
           "; check that the directory exists and is writable");
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size() && std::fflush(f) == 0 &&
            sync_file(f, path);
  const int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(path.c_str());
    throw Error(write_failure(shown, err));
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
    if (name[0] == '-') {  // a file of the previous set that the new one does not hold
      if (std::remove((dir + "/" + name.substr(1)).c_str()) != 0 && errno != ENOENT)
        throw Error(detail::concat_msg("cannot remove '", dir, "/", name.substr(1), "': ", std::strerror(errno)));
      continue;
    }
    const std::string tmp = dir + "/" + name + kSetTmp;
    if (std::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0 && errno != ENOENT)
      throw Error(detail::concat_msg("cannot rename '", tmp, "' into place: ", std::strerror(errno)));
  }
  sync_dir(dir);  // the renames on disk before the journal that would redo them goes
  std::remove((dir + kJournal).c_str());
}

void write_files_atomic(const std::string& dir, const FileSet& files, const std::vector<std::string>& replaces) {
  finish_file_set(dir);  // an earlier writer's set first
  auto plain = [](const std::string& name) {
    HZ_CHECK(!name.empty() && name[0] != '-' && name.find('/') == std::string::npos &&
                 name.find('\n') == std::string::npos,
             Error, "write_files_atomic: '", name, "' is not a plain file name");
  };
  std::string names;
  try {
    for (const auto& [name, content] : files) {
      plain(name);
      write_whole(dir + "/" + name + kSetTmp, content, dir + "/" + name);
      names += name + "\n";
    }
    for (const std::string& name : replaces) {  // the kind's files this set does not write go with it
      plain(name);
      bool written = false;
      for (const auto& f : files) written = written || f.first == name;
      if (!written) names += "-" + name + "\n";
    }
  } catch (...) {
    for (const auto& [name, content] : files) std::remove((dir + "/" + name + kSetTmp).c_str());
    throw;
  }
  // every file of the set and its name on disk before the journal's rename promises them: a crash
  // after it finds them whole (each was fsync'd as it was written)
  sync_dir(dir);
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
  if (::stat(path.c_str(), &st) != 0) {
    HZ_CHECK(errno == ENOENT, ValueError, "'", path, "': cannot open: ", std::strerror(errno));
    return std::ifstream();  // missing: the caller's "none yet"
  }
  HZ_CHECK(S_ISREG(st.st_mode), ValueError, "'", path, "': ", not_regular(st.st_mode));
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
