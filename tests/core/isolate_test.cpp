// core/isolate.h: a reader run in a child process comes back with its output, its refusal, or the
// news that it crashed or hung; the caller never crashes or hangs with it.
#include "core/isolate.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
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
