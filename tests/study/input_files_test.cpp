// Every input file is a regular file or a refusal naming it: a FIFO, a directory or a device in the
// place of a recipe, a tokenizer, config.json, a safetensors file or its index, a token shard or
// file, a corpus file, a grid file or a checkpoint used to keep the reader waiting for a writer for
// ever (a FIFO), or reading without end (/dev/zero). Each reader runs in a forked child with an alarm,
// so a reader that waits fails this test instead of hanging the suite.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/shard.h"
#include "data/token_files.h"
#include "data/tokenizer.h"
#include "hf/config.h"
#include "io/hdf5.h"
#include "io/safetensors.h"
#include "study/sweep.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/recipe.h"

using namespace hz;
namespace fs = std::filesystem;

namespace {

// What `reader` ends with, in a child with a 10 s alarm: the hz::Error's message,
// or "(hung)", "(accepted)", "(crashed)".
std::string outcome(const std::function<void()>& reader) {
  int p[2];
  if (pipe(p) != 0) return "(no pipe)";
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    alarm(10);
    std::string msg = "(accepted)";
    try {
      reader();
    } catch (const hz::Error& e) {
      msg = e.what();
    } catch (const std::exception& e) {
      msg = std::string("(not an hz::Error) ") + e.what();
    }
    (void)!write(p[1], msg.data(), msg.size());
    _exit(0);
  }
  close(p[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFSIGNALED(st)) return WTERMSIG(st) == SIGALRM ? "(hung)" : "(crashed)";
  return msg;
}

// The three kinds of non-files, made at `path`.
enum class Kind { Fifo, Directory, Device };
const char* kind_words(Kind k) {
  return k == Kind::Fifo ? "is a FIFO" : k == Kind::Directory ? "is a directory" : "is a character device";
}
void make_at(const std::string& path, Kind k) {
  fs::remove_all(path);
  if (k == Kind::Fifo) ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  if (k == Kind::Directory) fs::create_directories(path);
  if (k == Kind::Device) fs::create_symlink("/dev/zero", path);  // followed: the device is what is read
}

}  // namespace

TEST(InputFiles, EveryReaderRefusesFifosDirectoriesAndDevicesNamingTheFile) {
  const std::string root = test::make_tmp_dir("hz_input_files_test");
  struct Reader {
    std::string name, path;  // the input's role, and where the non-file goes
    std::function<void(const std::string&)> read;
  };
  const std::string hf_dir = root + "/hf", st_dir = root + "/st", idx_dir = root + "/idx";
  fs::create_directories(hf_dir);
  fs::create_directories(st_dir);
  fs::create_directories(idx_dir);
  const std::vector<Reader> readers = {
      {"recipe", root + "/r.yaml", [](const std::string& p) { (void)train::load_recipe(p); }},
      {"tokenizer.json", root + "/tokenizer.json", [](const std::string& p) { (void)data::make_tokenizer(p); }},
      {"SentencePiece model", root + "/sp.model", [](const std::string& p) { (void)data::make_tokenizer(p); }},
      {"config.json", hf_dir + "/config.json", [&](const std::string&) { (void)hf::import_config_dir(hf_dir); }},
      {"model.safetensors", st_dir + "/model.safetensors",
       [&](const std::string&) { (void)io::SafetensorsSet::open_dir(st_dir); }},
      {"shard index", idx_dir + "/model.safetensors.index.json",
       [&](const std::string&) { (void)io::SafetensorsSet::open_dir(idx_dir); }},
      {"token shard", root + "/train.bin", [](const std::string& p) { (void)data::Shard::open(p); }},
      {"token file", root + "/tok.bin",
       [](const std::string& p) { (void)data::read_token_file(p, data::TokenFormat::LlmC, 50257); }},
      {"text file", root + "/corpus.txt", [](const std::string& p) { (void)data::load_text_files({p}); }},
      {"JSONL file", root + "/corpus.jsonl", [](const std::string& p) { (void)data::load_jsonl({p}, "text"); }},
      {"factor file", root + "/factors.json",
       [](const std::string& p) { (void)train::factors_from_json(p, "rope_freq_factors"); }},
      {"grid file", root + "/grid.sweep.yaml", [](const std::string& p) { (void)study::load_sweep(p); }},
      {"checkpoint", root + "/step_1.h5", [](const std::string& p) { (void)train::load_checkpoint(p); }},
      {"HDF5 file", root + "/any.h5", [](const std::string& p) { (void)io::h5::File::open(p); }},
  };
  for (const Reader& r : readers)
    for (Kind k : {Kind::Fifo, Kind::Directory, Kind::Device}) {
      make_at(r.path, k);
      const std::string msg = outcome([&] { r.read(r.path); });
      EXPECT_NE(msg.find(r.path), std::string::npos) << r.name << ", " << kind_words(k) << ": " << msg;
      EXPECT_NE(msg.find(kind_words(k)), std::string::npos) << r.name << ", " << kind_words(k) << ": " << msg;
      fs::remove_all(r.path);
    }
  fs::remove_all(root);
}
