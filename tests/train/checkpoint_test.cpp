// Horizon train tests: HDF5 checkpoints are complete or absent.
//
// Round trips are bitwise (random bit patterns, NaN payloads included); corruption is produced by
// editing the saved file's bytes (a flipped byte found by searching for a written pattern,
// truncation at several sizes); crash safety by SIGKILLing a child process that keeps saving.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "core/hash.h"
#include "io/hdf5.h"

namespace {

namespace fs = std::filesystem;
using hz::DType;
using hz::Shape;
using hz::Tensor;
using namespace hz::train;
namespace h5 = hz::io::h5;

// A fresh directory under /tmp, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/hz_ckpt_test_XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (!p) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// A tensor of the given dtype and shape filled with random bit patterns (every bit pattern is
// allowed: NaNs with payloads, infinities, denormals, -0).
Tensor random_bits(DType dt, const Shape& shape, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, dt);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  const size_t n = static_cast<size_t>(t.numel()) * hz::dtype_size(dt);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

// Same dtype, same shape, same bytes (compared on contiguous copies).
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    return ::testing::AssertionFailure()
           << "dtype " << hz::dtype_name(a.dtype()) << " vs " << hz::dtype_name(b.dtype());
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure()
           << "shape " << hz::shape_str(a.shape()) << " vs " << hz::shape_str(b.shape());
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t n = static_cast<size_t>(a.numel()) * hz::dtype_size(a.dtype());
  if (n && std::memcmp(ca.raw_data(), cb.raw_data(), n) != 0)
    return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const char* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(n));
}

// Runs `body` and returns the CheckpointError message ("" + a test failure if nothing or
// something else was thrown).
template <class F>
std::string checkpoint_error_of(F&& body) {
  try {
    body();
  } catch (const CheckpointError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected CheckpointError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected CheckpointError, nothing was thrown";
  return "";
}

CheckpointData small_checkpoint(int64_t step) {
  CheckpointData c;
  c.step = step;
  c.tokens_seen = step * 1024;
  c.model["embed.weight"] = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  c.model["layers.0.norm.weight"] = Tensor::from_vector({0.5, 0.25}, {2}, DType::BF16);
  c.optimizer["adamw/embed.weight/exp_avg"] = Tensor::zeros({2, 3});
  c.counters["world_size"] = 1;
  c.meta["recipe"] = "seed: " + std::to_string(step) + "\n";
  return c;
}

// ---- key escaping -------------------------------------------------------------------------------
TEST(CheckpointKeys, EscapingRoundTripsArbitraryNames) {
  std::vector<std::string> keys = {"a/b.c",
                                   "x y",
                                   "layers.0.attn.wq.weight",
                                   "adamw/layers.0.attn.wq.weight/exp_avg",
                                   ".",
                                   "..",
                                   ".hidden",
                                   "a..b",
                                   "%",
                                   "%2F",
                                   "%%41",
                                   "100%/",
                                   "/",
                                   "//",
                                   "a/",
                                   "tab\there",
                                   "new\nline",
                                   "\x7f",
                                   u8"ünïcødé/中文/🚀"};
  std::string all_bytes;
  for (int b = 1; b < 256; ++b) all_bytes += static_cast<char>(b);
  keys.push_back(all_bytes);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string k(1 + rng() % 12, ' ');
    for (auto& ch : k) ch = static_cast<char>(1 + rng() % 255);
    keys.push_back(k);
  }
  std::set<std::string> escaped;
  std::set<std::string> distinct(keys.begin(), keys.end());
  for (const auto& k : keys) {
    const std::string e = escape_key(k);
    EXPECT_EQ(e.find('/'), std::string::npos) << e;
    ASSERT_FALSE(e.empty());
    EXPECT_NE(e[0], '.') << e;
    for (unsigned char ch : e)
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "byte " << int(ch) << " in " << e;
    EXPECT_EQ(unescape_key(e), k);
    escaped.insert(e);
  }
  EXPECT_EQ(escaped.size(), distinct.size()) << "escaping must be injective";
  EXPECT_EQ(escape_key("adamw/layers.0.wq/exp_avg"), "adamw%2Flayers.0.wq%2Fexp_avg");
  EXPECT_EQ(escape_key("x y"), "x y");
  EXPECT_THROW(unescape_key("abc%4"), hz::ValueError);
  EXPECT_THROW(unescape_key("abc%zz"), hz::ValueError);
}

// ---- round trips ------------------------------------------------------------------------------
TEST(Checkpoint, BitwiseRoundTripOfEveryDtypeShapeAndAwkwardName) {
  TempDir dir;
  std::mt19937_64 rng(2024);
  CheckpointData c;
  c.step = 123456789012;
  c.tokens_seen = std::numeric_limits<int64_t>::max() - 5;
  const DType dtypes[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64};
  const Shape shapes[] = {{}, {0}, {3, 0, 2}, {1}, {7}, {5, 3}, {2, 3, 4}};
  const std::string names[] = {"a/b.c", "x y", "layers.0.attn.wq.weight", ".dot", "100%"};
  int idx = 0;
  for (DType dt : dtypes) {
    for (const Shape& s : shapes) {
      const std::string name = names[idx % 5] + "#" + hz::dtype_name(dt) + hz::shape_str(s);
      c.model[name] = random_bits(dt, s, rng);
      c.optimizer["adamw/" + name + "/exp_avg"] = random_bits(dt, s, rng);
      ++idx;
    }
  }
  // A non-contiguous view is written as its row-major values.
  Tensor base = random_bits(DType::F32, {4, 6}, rng);
  c.model["transposed"] = base.transpose(0, 1);
  const std::string path = checkpoint_path(dir.path, c.step);
  save_checkpoint(path, c);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const CheckpointData r = load_checkpoint(path);
  EXPECT_EQ(r.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(r.step, c.step);
  EXPECT_EQ(r.tokens_seen, c.tokens_seen);
  ASSERT_EQ(r.model.size(), c.model.size());
  ASSERT_EQ(r.optimizer.size(), c.optimizer.size());
  for (const auto* pair : {&c.model, &c.optimizer}) {
    const auto& loaded = pair == &c.model ? r.model : r.optimizer;
    for (const auto& [k, t] : *pair) {
      auto it = loaded.find(k);
      ASSERT_NE(it, loaded.end()) << "missing " << k;
      EXPECT_TRUE(bitwise_equal(it->second, t)) << k;
      // (Zero-element tensors are skipped: core's is_contiguous() disagrees with the strides
      // Tensor::empty gives a shape such as (3, 0, 2).)
      if (t.numel() > 0) {
        EXPECT_TRUE(it->second.is_contiguous()) << k;
      }
    }
  }
  EXPECT_EQ(r.model.at("transposed").shape(), (Shape{6, 4}));
  EXPECT_EQ(r.model.at("transposed").at({5, 2}), base.at({2, 5}));
  EXPECT_EQ(checkpoint_checksum(r), checkpoint_checksum(c));
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0) << "HDF5 handles left open";
}

TEST(Checkpoint, CountersAndMetaRoundTrip) {
  TempDir dir;
  CheckpointData c;
  c.counters = {{"rng/offset", 987654321987LL},
                {"loader/rank0/epoch", 3},
                {"loader/rank0/cursor", 0},
                {"world_size", 2},
                {"min", std::numeric_limits<int64_t>::min()},
                {"max", std::numeric_limits<int64_t>::max()},
                {"neg/one", -1}};
  const std::string yaml =
      "# résolu — resolved recipe ✓\n"
      "model:\n"
      "  name: \"tiny 中文 🚀\"\n"
      "  layers: 2\n"
      "  attention: [scope, swan]\n"
      "optim:\n"
      "  lr: 3.0e-4\n";
  c.meta = {{"recipe", yaml},
            {"horizon_version", "0.1.0"},
            {"empty", ""},
            {u8"ключ/with/slashes", u8"значение"}};
  const std::string path = dir / "c.h5";
  save_checkpoint(path, c);
  const CheckpointData r = load_checkpoint(path);
  EXPECT_EQ(r.counters, c.counters);
  EXPECT_EQ(r.meta, c.meta);
  EXPECT_EQ(r.meta.at("recipe"), yaml);
  EXPECT_TRUE(r.model.empty());
  EXPECT_TRUE(r.optimizer.empty());

  // Overwriting the same path replaces the content.
  c.counters["world_size"] = 8;
  c.meta.erase("empty");
  save_checkpoint(path, c);
  const CheckpointData r2 = load_checkpoint(path);
  EXPECT_EQ(r2.counters.at("world_size"), 8);
  EXPECT_EQ(r2.meta.count("empty"), 0u);
}

TEST(Checkpoint, SaveRejectsInvalidDataAndLeavesTheOldFile) {
  TempDir dir;
  const std::string path = dir / "c.h5";
  save_checkpoint(path, small_checkpoint(1));

  CheckpointData bad = small_checkpoint(2);
  bad.model["undefined"] = Tensor();
  EXPECT_THROW(save_checkpoint(path, bad), hz::ValueError);
  bad = small_checkpoint(2);
  bad.model[""] = Tensor::zeros({1});
  EXPECT_THROW(save_checkpoint(path, bad), hz::ValueError);
  bad = small_checkpoint(2);
  bad.meta["recipe"] = std::string("a\0b", 3);
  EXPECT_THROW(save_checkpoint(path, bad), hz::ValueError);
  bad = small_checkpoint(2);
  bad.format_version = 2;
  EXPECT_THROW(save_checkpoint(path, bad), hz::ValueError);

  // An HDF5 failure while writing (the .tmp path is occupied by a directory) is a CheckpointError,
  // and the previous checkpoint survives.
  fs::create_directory(path + ".tmp");
  const std::string msg = checkpoint_error_of([&] { save_checkpoint(path, small_checkpoint(3)); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(load_checkpoint(path).step, 1);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0) << "HDF5 handles left open";

  // Missing parent directories are created.
  const std::string nested = dir / "run/a/b/step_4.h5";
  save_checkpoint(nested, small_checkpoint(4));
  EXPECT_EQ(load_checkpoint(nested).step, 4);
}

// ---- corruption -------------------------------------------------------------------------------
TEST(Checkpoint, FlippedByteInTensorDataIsDetected) {
  TempDir dir;
  CheckpointData c = small_checkpoint(5);
  // A recognisable pattern: i64 values 0x0BADC0DE00000000 + i.
  Tensor pat = Tensor::empty({4096}, DType::I64);
  for (int64_t i = 0; i < 4096; ++i) pat.data<int64_t>()[i] = 0x0BADC0DE00000000LL + i;
  c.optimizer["adamw/pattern/exp_avg_sq"] = pat;
  const std::string path = dir / "c.h5";
  save_checkpoint(path, c);
  ASSERT_EQ(load_checkpoint(path).optimizer.at("adamw/pattern/exp_avg_sq").at({100}),
            static_cast<double>(0x0BADC0DE00000000LL + 100));

  std::vector<char> bytes = read_bytes(path);
  const int64_t needle_value = 0x0BADC0DE00000000LL + 1000;
  char needle[8];
  std::memcpy(needle, &needle_value, 8);
  auto at = std::search(bytes.begin(), bytes.end(), needle, needle + 8);
  ASSERT_NE(at, bytes.end()) << "pattern not found in the file: is the data stored contiguously?";
  at[3] ^= 0x10;
  const std::string bad = dir / "flipped.h5";
  write_bytes(bad, bytes.data(), bytes.size());
  const std::string msg = checkpoint_error_of([&] { load_checkpoint(bad); });
  EXPECT_NE(msg.find(bad + ": checksum mismatch: the file is corrupted; use an earlier checkpoint"),
            std::string::npos)
      << msg;

  // The same for a character of the stored recipe string.
  bytes = read_bytes(path);
  const std::string text = "seed: 5\n";
  auto t = std::search(bytes.begin(), bytes.end(), text.begin(), text.end());
  ASSERT_NE(t, bytes.end());
  t[6] = '6';
  write_bytes(bad, bytes.data(), bytes.size());
  const std::string msg2 = checkpoint_error_of([&] { load_checkpoint(bad); });
  EXPECT_NE(msg2.find("checksum mismatch"), std::string::npos) << msg2;
}

TEST(Checkpoint, TruncationAtSeveralSizesIsDetected) {
  TempDir dir;
  CheckpointData c = small_checkpoint(6);
  std::mt19937_64 rng(6);
  c.model["big"] = random_bits(DType::F32, {64, 256}, rng);
  const std::string path = dir / "c.h5";
  save_checkpoint(path, c);
  const std::vector<char> bytes = read_bytes(path);
  const size_t n = bytes.size();
  ASSERT_GT(n, 64u * 256u * 4u);
  const std::string cut = dir / "cut.h5";
  for (size_t size : {size_t(0), size_t(4), size_t(8), size_t(96), size_t(700), size_t(4096), n / 3,
                      n / 2, n - 4096, n - 8, n - 1}) {
    write_bytes(cut, bytes.data(), size);
    const std::string msg = checkpoint_error_of([&] { load_checkpoint(cut); });
    EXPECT_NE(msg.find(cut + ":"), std::string::npos) << "size " << size << ": " << msg;
    EXPECT_NE(msg.find("use an earlier checkpoint"), std::string::npos)
        << "size " << size << ": " << msg;
  }
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0) << "HDF5 handles left open";
}

TEST(Checkpoint, MissingOrForeignFilesAreRefusedWithTheirPath) {
  TempDir dir;
  const std::string missing = dir / "nope.h5";
  std::string msg = checkpoint_error_of([&] { load_checkpoint(missing); });
  EXPECT_NE(msg.find(missing + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;

  const std::string text = dir / "notes.h5";
  const std::string content = "model: tiny\nthis is YAML, not HDF5\n";
  write_bytes(text, content.data(), content.size());
  msg = checkpoint_error_of([&] { load_checkpoint(text); });
  EXPECT_NE(msg.find(text + ": not an HDF5 file"), std::string::npos) << msg;

  msg = checkpoint_error_of([&] { load_checkpoint(dir.path); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;

  // An HDF5 file that is not a Horizon checkpoint: refused unread without the checksum block,
  // and for its layout with one.
  const std::string foreign = dir / "foreign.h5", sealed = dir / "sealed.h5";
  for (const std::string& p : {foreign, sealed}) {
    h5::File f = h5::File::create(p, p == sealed ? 512 : 0);
    h5::Dataset d = f.root().create_dataset("x", H5T_IEEE_F32LE, {3});
    const float v[3] = {1, 2, 3};
    d.write(H5T_NATIVE_FLOAT, v);
  }
  hz::train::seal_checkpoint_file(sealed);
  msg = checkpoint_error_of([&] { load_checkpoint(foreign); });
  EXPECT_NE(msg.find(foreign + ": an HDF5 file without Horizon's checksum block"), std::string::npos) << msg;
  msg = checkpoint_error_of([&] { load_checkpoint(sealed); });
  EXPECT_NE(msg.find(sealed + ": not a Horizon checkpoint"), std::string::npos) << msg;
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0) << "HDF5 handles left open";
}

TEST(Checkpoint, UnsupportedFormatVersionNamesBothVersions) {
  TempDir dir;
  const std::string path = dir / "c.h5";
  save_checkpoint(path, small_checkpoint(7));
  {
    h5::File f = h5::File::open(path, /*writable=*/true);
    EXPECT_EQ(f.root().read_attr_i64("format_version"), 1);
    f.root().write_attr_i64("format_version", 42);
    f.close();
  }
  {  // reseal the edited file as a writer of that version would: the user block's whole-file
     // checksum (magic, size, FNV-1a 64 of the bytes after the 512-byte block; train/checkpoint.h)
    std::vector<char> b = read_bytes(path);
    ASSERT_EQ(std::memcmp(b.data(), "HZSUM001", 8), 0);
    const uint64_t size = b.size(), sum = hz::fnv1a64(b.data() + 512, b.size() - 512);
    std::memcpy(b.data() + 8, &size, 8);
    std::memcpy(b.data() + 16, &sum, 8);
    write_bytes(path, b.data(), b.size());
  }
  const std::string msg = checkpoint_error_of([&] { load_checkpoint(path); });
  EXPECT_NE(msg.find(path + ": unsupported checkpoint format_version 42"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("reads format_version 1"), std::string::npos) << msg;
}

// ---- crash safety -----------------------------------------------------------------------------
// A child process saves 64 MiB checkpoints to one path in a loop, each iteration with its own
// value everywhere, and reports each completed save through a pipe. The parent SIGKILLs it at
// random moments; the file at the path must then load and hold one complete iteration: the last
// reported one, or the next (renamed but not yet reported).
TEST(CheckpointCrash, KillDuringSaveLeavesACompleteCheckpoint) {
  TempDir dir;
  const std::string path = dir / "step_0.h5";
  constexpr int64_t kFloats = 16 * 1024 * 1024;  // 64 MiB
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("kill-time seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int left_tmp = 0;
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      try {
        CheckpointData c;
        Tensor w = Tensor::empty({kFloats}, DType::F32);
        Tensor b = Tensor::empty({1000}, DType::I64);
        c.model["w"] = w;
        c.optimizer["adamw/w/step"] = b;
        for (int64_t i = 0;; ++i) {
          const int64_t it = round * 100000 + i;
          float* pw = w.data<float>();
          for (int64_t k = 0; k < kFloats; ++k) pw[k] = static_cast<float>(it);
          int64_t* pb = b.data<int64_t>();
          for (int64_t k = 0; k < 1000; ++k) pb[k] = it;
          c.step = it;
          c.tokens_seen = it * 7;
          c.counters["iteration"] = it;
          c.meta["iteration"] = std::to_string(it);
          save_checkpoint(path, c);
          if (write(fds[1], &it, sizeof it) != sizeof it) _exit(2);
        }
      } catch (...) {
        _exit(3);
      }
    }
    close(fds[1]);
    int64_t reported = -1, v = 0;
    // Wait for this round's first complete save.
    ASSERT_EQ(read(fds[0], &v, sizeof v), static_cast<ssize_t>(sizeof v)) << "child failed to save";
    reported = v;
    const double first_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (round % 2 == 0) {
      // Any moment of the save loop (filling, checksumming, writing, fsync, rename).
      std::uniform_real_distribution<double> when(0.0, 1.5 * first_s);
      std::this_thread::sleep_for(std::chrono::duration<double>(when(rng)));
    } else {
      // Aim at the write itself: wait for the next save's .tmp to appear, then kill soon after.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!fs::exists(path + ".tmp") && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::uniform_real_distribution<double> when(0.0, 0.1 * first_s);  // a write takes ~1/6
      std::this_thread::sleep_for(std::chrono::duration<double>(when(rng)));
    }
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child ended on its own (status " << status << ")";
    while (read(fds[0], &v, sizeof v) == static_cast<ssize_t>(sizeof v)) reported = v;
    close(fds[0]);
    if (fs::exists(path + ".tmp")) ++left_tmp;

    CheckpointData c;
    ASSERT_NO_THROW(c = load_checkpoint(path)) << "round " << round;
    const int64_t it = c.step;
    EXPECT_TRUE(it == reported || it == reported + 1)
        << "loaded iteration " << it << ", last reported " << reported;
    EXPECT_EQ(c.tokens_seen, it * 7);
    EXPECT_EQ(c.counters.at("iteration"), it);
    EXPECT_EQ(c.meta.at("iteration"), std::to_string(it));
    const Tensor& w = c.model.at("w");
    ASSERT_EQ(w.numel(), kFloats);
    const float* pw = w.data<float>();
    int64_t wrong = 0;
    for (int64_t k = 0; k < kFloats; ++k) wrong += pw[k] != static_cast<float>(it);
    EXPECT_EQ(wrong, 0) << "iteration " << it << " has values of another iteration";
    const Tensor& b = c.optimizer.at("adamw/w/step");
    for (int64_t k = 0; k < 1000; ++k) ASSERT_EQ(b.data<int64_t>()[k], it);
  }
  // Informational: how many kills landed inside a save (a stale .tmp was left behind).
  std::printf("[ info ] %d of %d kills interrupted a save in progress\n", left_tmp, kRounds);
  EXPECT_EQ(find_latest_checkpoint(dir.path), path);  // the stale .tmp is ignored
}

// ---- run directories --------------------------------------------------------------------------
TEST(CheckpointDir, ListFindLatestAndPrune) {
  TempDir dir;
  EXPECT_EQ(find_latest_checkpoint(dir.path), "");
  EXPECT_TRUE(list_checkpoints(dir.path).empty());
  EXPECT_EQ(find_latest_checkpoint(dir / "does_not_exist"), "");
  EXPECT_TRUE(list_checkpoints(dir / "does_not_exist").empty());

  EXPECT_EQ(checkpoint_path("run", 5), "run/step_5.h5");
  EXPECT_EQ(checkpoint_path("run/", 12), "run/step_12.h5");
  EXPECT_THROW(checkpoint_path("run", -1), hz::ValueError);

  for (int64_t s : {10, 2, 100, 1, 20})
    save_checkpoint(checkpoint_path(dir.path, s), small_checkpoint(s));
  // Things that are not checkpoints.
  for (const char* junk : {"step_7.h5.tmp", "step_500.h5.tmp", "step_x.h5", "step_.h5",
                           "step_3.hdf5", "notes.txt", "step_-4.h5"})
    write_bytes(dir / junk, "junk", 4);
  fs::create_directory(dir / "step_999.h5");

  const std::vector<std::string> expected = {dir / "step_1.h5", dir / "step_2.h5",
                                             dir / "step_10.h5", dir / "step_20.h5",
                                             dir / "step_100.h5"};
  EXPECT_EQ(list_checkpoints(dir.path), expected);
  EXPECT_EQ(find_latest_checkpoint(dir.path), dir / "step_100.h5");
  EXPECT_EQ(load_checkpoint(find_latest_checkpoint(dir.path)).step, 100);

  EXPECT_THROW(prune_checkpoints(dir.path, 0), hz::ValueError);
  prune_checkpoints(dir.path, 2);
  EXPECT_EQ(list_checkpoints(dir.path),
            (std::vector<std::string>{dir / "step_20.h5", dir / "step_100.h5"}));
  EXPECT_FALSE(fs::exists(dir / "step_7.h5.tmp"));   // stale: older than the newest checkpoint
  EXPECT_TRUE(fs::exists(dir / "step_500.h5.tmp"));  // may be a save in progress: kept
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir / "step_x.h5"));
  prune_checkpoints(dir.path, 5);  // fewer than keep_last: nothing to do
  EXPECT_EQ(list_checkpoints(dir.path).size(), 2u);
  prune_checkpoints(dir.path, 1);
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<std::string>{dir / "step_100.h5"}));
  EXPECT_EQ(load_checkpoint(dir / "step_100.h5").step, 100);
}

// ---- interoperability -------------------------------------------------------------------------
TEST(CheckpointInterop, H5pyReadsTheLayout) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py is not importable by /usr/bin/python3 (apt-get install python3-h5py)";
  TempDir dir;
  CheckpointData c;
  c.step = 42;
  c.model["layers.0.w"] = Tensor::from_vector({1.5, -2.25, 3.0, 0.0, 0.125, -7.0}, {2, 3});
  c.optimizer["adamw/layers.0.w/exp_avg"] = Tensor::from_vector({0.5, 4.0}, {2}, DType::F64);
  c.model["norm.g"] = Tensor::from_vector({1.0, -0.5, 2.0}, {3}, DType::BF16);
  c.counters["rng/offset"] = 77;
  c.meta["recipe"] = "name: \"ünï 中文\"\nlayers: 2\n";
  const std::string path = dir / "c.h5";
  save_checkpoint(path, c);

  const std::string script = dir / "read.py";
  const std::string py =
      "import sys, h5py\n"
      "f = h5py.File(sys.argv[1], 'r')\n"
      "s = lambda v: v.decode() if isinstance(v, bytes) else v  # fixed-length strings read as bytes\n"
      "d = f['optimizer']['adamw%2Flayers.0.w%2Fexp_avg']\n"
      "print(s(d.attrs['key']))\n"
      "print(d.dtype, d.shape, ' '.join(repr(float(x)) for x in d[()].ravel()))\n"
      "w = f['model']['layers.0.w']\n"
      "print(s(w.attrs['key']), w.dtype, w.shape, ' '.join(repr(float(x)) for x in w[()].ravel()))\n"
      "g = f['model']['norm.g']\n"
      "print(s(g.attrs['dtype']), g.dtype, ' '.join(str(int(x)) for x in g[()]))\n"
      "print(int(f.attrs['format_version']), int(f.attrs['step']), "
      "int(f['counters']['rng%2Foffset'][()]))\n"
      "print(f['meta']['recipe'].asstr()[()] == 'name: \"\\u00fcn\\u00ef "
      "\\u4e2d\\u6587\"\\nlayers: 2\\n')\n";
  write_bytes(script, py.data(), py.size());
  const std::string cmd =
      "PYTHONIOENCODING=utf-8 /usr/bin/python3 " + script + " " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  ASSERT_EQ(pclose(p), 0) << out;
  std::vector<std::string> lines;
  for (size_t s = 0, e; s < out.size(); s = e + 1) {
    e = out.find('\n', s);
    if (e == std::string::npos) e = out.size();
    lines.push_back(out.substr(s, e - s));
  }
  ASSERT_GE(lines.size(), 6u) << out;
  EXPECT_EQ(lines[0], "adamw/layers.0.w/exp_avg");
  EXPECT_EQ(lines[1], "float64 (2,) 0.5 4.0");
  EXPECT_EQ(lines[2], "layers.0.w float32 (2, 3) 1.5 -2.25 3.0 0.0 0.125 -7.0");
  // bf16 bit patterns: 1.0 = 0x3F80, -0.5 = 0xBF00, 2.0 = 0x4000.
  EXPECT_EQ(lines[3], "bf16 uint16 16256 48896 16384");
  EXPECT_EQ(lines[4], "1 42 77");
  EXPECT_EQ(lines[5], "True");
}

}  // namespace
