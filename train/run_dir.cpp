#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/file.h"

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace hz::train {

namespace {
std::string host_name() {
  char h[256] = {0};
  if (gethostname(h, sizeof(h) - 1) != 0) return "unknown-host";
  return h;
}
std::string read_fd(int fd) {
  std::string s;
  char buf[256];
  if (lseek(fd, 0, SEEK_SET) < 0) return s;
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0 && s.size() < 4096;) s.append(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// fs::create_directories, with the failure as a ValueError naming the directory (a std::filesystem
// error escaping would be an internal error).
void make_dirs(const std::string& dir, const char* what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw ValueError(std::string("cannot create ") + what + " '" + dir + "': " +
                     (ec ? ec.message() : std::string("a file of that name is in the way")) +
                     "; check run.out_dir and its permissions");
}

// Keeps metrics.jsonl's records of steps <= step (the rest are trained again), atomically.
void drop_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in = open_input_stream(path);  // a regular file, or none yet (core/file.h)
  if (!in) return;
  std::ostringstream kept;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    const size_t k = line.find("\"step\": ");
    if (k != std::string::npos && std::strtoll(line.c_str() + k + 8, nullptr, 10) > step) {
      dropped = true;
      continue;
    }
    kept << line << "\n";
  }
  in.close();
  if (!dropped) return;
  write_file_atomic(path, kept.str());
}
}  // namespace

RunLock::RunLock(const std::string& dir, const std::string& role)
    : path_(dir + (role == "run" ? std::string("/.lock") : "/." + role + ".lock")) {
  make_dirs(dir, "the run directory");
  for (int attempt = 0; attempt < 5; ++attempt) {
    // O_NOFOLLOW: a symbolic link planted at the lock's path (a shared run directory) would make
    // the holder overwrite its target and echo the target's first line
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd_ < 0 && (errno == EROFS || errno == EACCES || errno == EPERM))
      throw ReadOnlyDirError("cannot create the run lock '" + path_ + "': " + std::strerror(errno) +
                             "; check run.out_dir and its permissions");
    HZ_CHECK(fd_ >= 0, ValueError, "cannot create the run lock '", path_, "': ",
             errno == ELOOP ? std::string("it is a symbolic link, which Horizon does not follow; remove it")
                            : std::string(std::strerror(errno)) + "; check run.out_dir and its permissions");
    struct stat kind {};
    if (fstat(fd_, &kind) != 0 || !S_ISREG(kind.st_mode)) {
      ::close(fd_);
      fd_ = -1;
      throw ValueError("the run lock '" + path_ + "' is not a regular file; remove it");
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder = read_fd(fd_);
      // the holder writes "host pid" just after taking the flock: give it a moment
      for (int i = 0; i < 20 && holder.empty(); ++i) {
        usleep(10000);
        holder = read_fd(fd_);
      }
      ::close(fd_);
      fd_ = -1;
      HZ_CHECK(err == EWOULDBLOCK, ValueError, "cannot lock '", path_, "': ", std::strerror(err));
      throw ValueError("run directory '" + dir + "' is in use by another " + role + " (" +
                       (holder.empty() ? std::string("holder unknown") : "host pid: " + holder) + "; lock file " + path_ +
                       "): one " + role + " per directory at a time; wait for it to finish or choose another "
                       "run.name / run.out_dir");
    }
    // the holder before us may have removed the file between our open and our flock: lock the file
    // that is at the path now
    struct stat a {}, b {};
    if (fstat(fd_, &a) == 0 && stat(path_.c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) break;
    ::close(fd_);
    fd_ = -1;
  }
  HZ_CHECK(fd_ >= 0, ValueError, "cannot lock '", path_, "': it keeps being replaced");
  stale_ = read_fd(fd_);  // a previous holder that did not remove it (killed) no longer holds it
  const std::string me = host_name() + " " + std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || lseek(fd_, 0, SEEK_SET) < 0 ||
      write(fd_, me.data(), me.size()) != static_cast<ssize_t>(me.size()))
    throw ValueError("cannot write the run lock '" + path_ + "': " + std::strerror(errno));
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // still holding the flock: nobody else can have taken it
  ::close(fd_);
}

RunDir::RunDir(const Recipe& r, bool lead, bool quiet, int64_t resumed_step)
    : dir_(r.run.out_dir + "/" + r.run.name), lead_(lead), quiet_(quiet) {
  if (!lead_) return;
  make_dirs(checkpoint_dir(), "the checkpoint directory");
  const bool resuming = resumed_step > 0;
  if (resuming) drop_metrics_after(dir_ + "/metrics.jsonl", resumed_step);
  const auto mode = resuming ? std::ios::app : std::ios::trunc;
  log_.open(dir_ + "/train.log", mode);
  metrics_.open(dir_ + "/metrics.jsonl", mode);
  write_file_atomic(dir_ + "/config.yaml", to_yaml(r));
  HZ_CHECK(log_.good() && metrics_.good(), ValueError, "cannot write into the run directory '", dir_,
           "'; check run.out_dir and its permissions");
  if (r.metrics.tensorboard) {
    if (!io::tensorboard_available()) {
      log("metrics.tensorboard: this build writes no TensorBoard event files (configured without protobuf/ISA-L); "
          "metrics.jsonl holds every number");
      return;
    }
    events_ = std::make_unique<io::EventWriter>(dir_);
    if (resuming) events_->session_start(resumed_step + 1);
    events_->text("recipe", "```\n" + to_yaml(r) + "```", resumed_step);
    events_->flush();
  }
}

RunDir::~RunDir() = default;

void RunDir::metrics(const std::string& line) {
  if (!lead_) return;
  metrics_ << line << "\n";
  metrics_.flush();
  HZ_CHECK(metrics_.good(), ValueError, "writing '", dir_, "/metrics.jsonl' failed; is the disk full?");
  if (events_) {
    events_->record(nlohmann::json::parse(line));
    events_->flush();
  }
}

void RunDir::save(int64_t step, const CheckpointData& c, int64_t keep_last) {
  if (!lead_) return;
  save_checkpoint(checkpoint_path(checkpoint_dir(), step), c);
  prune_checkpoints(checkpoint_dir(), static_cast<int>(keep_last));
}

}  // namespace hz::train
