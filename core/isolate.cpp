#include "core/isolate.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "core/error.h"

namespace hz {

IsolatedOutput::~IsolatedOutput() {
  if (data_ && size_) ::munmap(const_cast<char*>(data_), size_);
}

IsolatedOutput& IsolatedOutput::operator=(IsolatedOutput&& o) noexcept {
  if (this != &o) {
    if (data_ && size_) ::munmap(const_cast<char*>(data_), size_);
    data_ = o.data_, size_ = o.size_;
    o.data_ = nullptr, o.size_ = 0;
  }
  return *this;
}

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(std::string("cannot write the isolated reader's result: ") + std::strerror(errno));
    c += w;
    n -= static_cast<size_t>(w);
  }
}

namespace {
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
std::string read_text(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) return {};
  std::string s(static_cast<size_t>(std::min<off_t>(st.st_size, 1 << 16)), '\0');
  const ssize_t n = ::pread(fd, s.data(), s.size(), 0);
  s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return s;
}
[[noreturn]] void child(const std::function<void(int)>& work, int out, int err, pid_t parent) {
  // the reader dies with its parent: a parent killed outright (kill -9) leaves no one to enforce the
  // deadline, and a file that keeps libhdf5 looping would keep the orphan running for ever. The
  // parent may have died between fork() and prctl(); then the child is already someone else's.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(2);
  // a crash is reported by its signal (the parent's handlers, a sanitizer's included, would turn it
  // into an exit status)
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
  int code = 0;
  std::string msg;
  try {
    work(out);
  } catch (const Error& e) {
    msg = e.what(), code = 1;
  } catch (const std::bad_alloc&) {
    msg = "out of memory", code = 2;
  } catch (const std::exception& e) {
    msg = e.what(), code = 2;
  } catch (...) {
    msg = "an unknown exception", code = 2;
  }
  if (!msg.empty()) (void)::pwrite(err, msg.data(), msg.size(), 0);
  ::_exit(code);  // no exit handlers: they belong to the parent (libhdf5's shutdown, buffered stdio)
}
}  // namespace

IsolatedResult run_isolated(const std::function<void(int fd)>& work, double seconds) {
  IsolatedResult r;
  Fd out(::memfd_create("hz-isolated-out", MFD_CLOEXEC)), err(::memfd_create("hz-isolated-err", MFD_CLOEXEC));
  if (out.fd < 0 || err.fd < 0) throw Error(std::string("memfd_create failed: ") + std::strerror(errno));
  std::fflush(nullptr);  // the child must not write the parent's buffered output again
  const pid_t self = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) child(work, out.fd, err.fd, self);

  // wait, polling with a growing interval (1 ms to 20 ms), until the child ends or the deadline
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  auto pause = std::chrono::microseconds(1000);
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) throw Error(std::string("waitpid failed: ") + std::strerror(errno));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      r.status = IsolatedResult::Status::TimedOut;
      r.message = "did not finish in " + std::to_string(static_cast<int64_t>(seconds)) + " s";
      return r;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    r.status = IsolatedResult::Status::Crashed;
    r.message = "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    return r;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) {
    r.message = read_text(err.fd);
    // a refusal says why; an exit 1 without a message is something else's (a sanitizer's report)
    r.status = code == 1 && !r.message.empty() ? IsolatedResult::Status::Refused : IsolatedResult::Status::Failed;
    if (r.message.empty()) r.message = "exit status " + std::to_string(code);
    return r;
  }
  struct stat st {};
  if (::fstat(out.fd, &st) != 0) throw Error(std::string("fstat failed: ") + std::strerror(errno));
  r.status = IsolatedResult::Status::Ok;
  if (st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, out.fd, 0);
    if (p == MAP_FAILED) throw Error(std::string("cannot map the isolated reader's result: ") + std::strerror(errno));
    r.output = IsolatedOutput(static_cast<const char*>(p), static_cast<size_t>(st.st_size));
  }
  return r;
}

}  // namespace hz
