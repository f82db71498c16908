// core/isolate.h: a reader run in a child process comes back with its output, its refusal, or the
// news that it crashed or hung; the caller never crashes or hangs with it.
#include "core/isolate.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

using hz::IsolatedResult;

TEST(Isolate, OutputComesBack) {
  std::vector<char> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  IsolatedResult r = hz::run_isolated([&](int fd) { hz::write_all(fd, big.data(), big.size()); }, 30);
  ASSERT_EQ(r.status, IsolatedResult::Status::Ok) << r.message;
  ASSERT_EQ(r.output.size(), big.size());
  EXPECT_EQ(std::memcmp(r.output.data(), big.data(), big.size()), 0);
  IsolatedResult empty = hz::run_isolated([](int) {}, 30);
  EXPECT_EQ(empty.status, IsolatedResult::Status::Ok);
  EXPECT_EQ(empty.output.size(), 0u);
}

TEST(Isolate, RefusalCrashAndHangComeBackAsStatus) {
  IsolatedResult refused = hz::run_isolated([](int) { throw hz::ValueError("file.h5: not mine"); }, 30);
  EXPECT_EQ(refused.status, IsolatedResult::Status::Refused);
  EXPECT_EQ(refused.message, "file.h5: not mine");

  IsolatedResult crashed = hz::run_isolated([](int) { raise(SIGSEGV); }, 30);
  EXPECT_EQ(crashed.status, IsolatedResult::Status::Crashed);
  EXPECT_NE(crashed.message.find("signal 11"), std::string::npos) << crashed.message;

  IsolatedResult aborted = hz::run_isolated([](int) { std::abort(); }, 30);
  EXPECT_EQ(aborted.status, IsolatedResult::Status::Crashed);

  IsolatedResult other = hz::run_isolated([](int) { throw std::runtime_error("not an hz::Error"); }, 30);
  EXPECT_EQ(other.status, IsolatedResult::Status::Failed);
  EXPECT_EQ(other.message, "not an hz::Error");

  const auto t0 = std::chrono::steady_clock::now();
  IsolatedResult hung = hz::run_isolated([](int) { std::this_thread::sleep_for(std::chrono::hours(1)); }, 0.3);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(hung.status, IsolatedResult::Status::TimedOut);
  EXPECT_NE(hung.message.find("did not finish"), std::string::npos);
  EXPECT_LT(took, 10.0);
}

// A reader whose parent is killed (kill -9: no destructor, no deadline left to kill it) dies with
// it instead of running on, reparented, for as long as the file keeps libhdf5 busy.
TEST(Isolate, ReaderDiesWithItsParent) {
  int pids[2];
  ASSERT_EQ(pipe(pids), 0);
  std::fflush(nullptr);
  const pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    // the helper adopts the orphaned reader (as init would), so it can see how the reader ends
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) _exit(10);
    const pid_t parent = fork();
    if (parent < 0) _exit(11);
    if (parent == 0) {  // the reader's parent: waits on a reader that never finishes
      (void)hz::run_isolated([&](int) {
        const pid_t me = getpid();
        (void)!write(pids[1], &me, sizeof me);
        for (;;) pause();
      }, 600);
      _exit(12);
    }
    pid_t reader = 0;
    if (read(pids[0], &reader, sizeof reader) != static_cast<ssize_t>(sizeof reader)) _exit(13);
    kill(parent, SIGKILL);
    int st = 0;
    waitpid(parent, &st, 0);
    for (int i = 0; i < 500; ++i) {  // 5 s at most; the reader goes within milliseconds
      if (waitpid(reader, &st, WNOHANG) == reader) _exit(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : 14);
      usleep(10000);
    }
    kill(reader, SIGKILL);  // still running: the failure this test is about
    waitpid(reader, &st, 0);
    _exit(15);
  }
  int status = 0;
  ASSERT_EQ(waitpid(helper, &status, 0), helper);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "15: the reader outlived its killed parent";
}
