// io/tensorboard.h: records framed as TensorBoard frames them (the event reader in the tensorboard
// package reads them back: tests/e2e_tensorboard.sh), a full disk an error, not a crash.
#include "io/tensorboard.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/data/data_test_util.h"

namespace fs = std::filesystem;

namespace {
uint32_t le32(const unsigned char* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
}  // namespace

TEST(TensorBoard, MaskedCrc32cOfTheCheckString) {
  if (!hz::io::tensorboard_available()) GTEST_SKIP() << "built without HZ_TENSORBOARD";
  // CRC32C("123456789") = 0xe3069283 (the Castagnoli check value), masked as TensorBoard does
  const uint32_t c = 0xe3069283u, masked = ((c >> 15) | (c << 17)) + 0xa282ead8u;
  EXPECT_EQ(hz::io::masked_crc32c("123456789", 9), masked);
}

TEST(TensorBoard, EveryRecordIsFramedWithItsChecksums) {
  if (!hz::io::tensorboard_available()) GTEST_SKIP() << "built without HZ_TENSORBOARD";
  hzdt::TempDir d;
  std::string path;
  {
    hz::io::EventWriter w(d.path());
    path = w.path();
    EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
    w.scalar("loss", 2.5, 1);
    w.text("recipe", "model: {d_model: 8}", 0);
    w.session_start(2);
    w.record(nlohmann::json::parse(R"({"step": 3, "loss": 1.5, "eval": {"256": {"loss": 2.0}}, "note": "x"})"));
    w.flush();
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string b = ss.str();
  size_t at = 0, records = 0;
  while (at < b.size()) {
    ASSERT_LE(at + 12, b.size());
    const auto* p = reinterpret_cast<const unsigned char*>(b.data() + at);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(p[i]) << (8 * i);
    EXPECT_EQ(le32(p + 8), hz::io::masked_crc32c(p, 8)) << "record " << records;
    ASSERT_LE(at + 12 + n + 4, b.size());
    EXPECT_EQ(le32(p + 12 + n), hz::io::masked_crc32c(p + 12, n)) << "record " << records;
    at += 12 + n + 4;
    ++records;
  }
  // file version, the scalar, the text, the session start, two numbers of the record
  EXPECT_EQ(records, 6u);
  EXPECT_NE(b.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(b.find("eval/256/loss"), std::string::npos);
}

TEST(TensorBoard, AFullDiskIsAnErrorNamingTheFile) {
  if (!hz::io::tensorboard_available()) GTEST_SKIP() << "built without HZ_TENSORBOARD";
  hzdt::TempDir d;
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    alarm(60);
    rlimit lim{4096, 4096};  // as a full disk would: writes past 4 KB fail
    setrlimit(RLIMIT_FSIZE, &lim);
    int code = 5;
    try {
      hz::io::EventWriter w(d.path());
      for (int i = 0; i < 100000; ++i) {
        w.scalar("loss", i, i);
        if (i % 10 == 0) w.flush();
      }
      w.flush();
    } catch (const hz::Error& e) {
      code = std::strstr(e.what(), "is the disk full") && std::strstr(e.what(), d.path().c_str()) ? 1 : 6;
    } catch (...) {
      code = 7;
    }
    std::_Exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 1);
}
