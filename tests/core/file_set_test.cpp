// core/file.h: a result set is replaced whole or not at all (issue 36: an interrupted evaluation
// left a new eval.json beside the previous nll_by_position.csv).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tests/data/data_test_util.h"
#include "core/file.h"

namespace fs = std::filesystem;


TEST(FileSet, ReplacesEveryFileAndLeavesNoJournal) {
  hzdt::TempDir d;
  hz::write_files_atomic(d.path(), {{"eval.json", "old json"}, {"nll.csv", "old csv"}});
  hz::write_files_atomic(d.path(), {{"eval.json", "new json"}, {"nll.csv", "new csv"}});
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/eval.json"), "new json");
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/nll.csv"), "new csv");
  EXPECT_FALSE(fs::exists(d.path() + "/.results.pending"));
  for (const auto& e : fs::directory_iterator(d.path()))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  EXPECT_THROW(hz::write_files_atomic(d.path(), {{"a/b", "x"}}), hz::Error);
}

TEST(FileSet, AWriterStoppedBetweenItsRenamesIsFinishedByTheNext) {
  hzdt::TempDir d;
  hz::write_files_atomic(d.path(), {{"eval.json", "old json"}, {"nll.csv", "old csv"}});
  // what a writer killed after its first rename leaves: the journal, one file renamed, one not
  std::ofstream(d.path() + "/nll.csv.set.tmp") << "new csv";
  std::ofstream(d.path() + "/eval.json") << "new json";
  std::ofstream(d.path() + "/.results.pending") << "eval.json\nnll.csv\n";
  hz::finish_file_set(d.path());  // what a reader (horizon report) or the next writer does first
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/eval.json"), "new json");
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/nll.csv"), "new csv");
  EXPECT_FALSE(fs::exists(d.path() + "/.results.pending"));
  // killed before the journal: the old set stays whole; the stray temporary is overwritten later
  std::ofstream(d.path() + "/eval.json.set.tmp") << "half";
  hz::finish_file_set(d.path());
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/eval.json"), "new json");
  hz::write_files_atomic(d.path(), {{"eval.json", "third"}});
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/eval.json"), "third");
  EXPECT_FALSE(fs::exists(d.path() + "/eval.json.set.tmp"));
}

// A set of a kind (`replaces`) removes the previous set's files it does not write, also when a later
// reader finishes it from the journal; files outside the kind stay, and a name that would read as a
// removal is refused.
TEST(FileSet, FilesOfTheKindThatTheNewSetLacksGoWithIt) {
  hzdt::TempDir d;
  const std::vector<std::string> kind{"eval.json", "needles.csv", "probes.csv"};
  hz::write_files_atomic(d.path(), {{"eval.json", "old"}, {"needles.csv", "old needles"}, {"probes.csv", "p"}}, kind);
  std::ofstream(d.path() + "/notes.txt") << "mine";
  hz::write_files_atomic(d.path(), {{"eval.json", "new"}, {"probes.csv", "p2"}}, kind);
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/eval.json"), "new");
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/probes.csv"), "p2");
  EXPECT_FALSE(fs::exists(d.path() + "/needles.csv"));
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/notes.txt"), "mine");
  // a writer killed after its journal: the reader's finish_file_set renames and removes alike
  std::ofstream(d.path() + "/eval.json.set.tmp") << "third";
  std::ofstream(d.path() + "/.results.pending") << "eval.json\n-probes.csv\n-needles.csv\n";
  hz::finish_file_set(d.path());
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/eval.json"), "third");
  EXPECT_FALSE(fs::exists(d.path() + "/probes.csv"));
  EXPECT_FALSE(fs::exists(d.path() + "/.results.pending"));
  EXPECT_THROW(hz::write_files_atomic(d.path(), {{"-eval.json", "x"}}), hz::Error);
  EXPECT_THROW(hz::write_files_atomic(d.path(), {{"eval.json", "x"}}, {"a/b"}), hz::Error);
  EXPECT_EQ(hzdt::read_bytes(d.path() + "/eval.json"), "third");  // refused before anything moved
}

// Two processes preparing one data cache side by side wrote the same file: each rename must find
// its own temporary (they shared "path.tmp", and the second rename failed with ENOENT). Processes,
// as in the failure: each child writes the file many times and exits 0 when every write succeeded.
TEST(FileAtomic, WritersSideBySideEachLandAWholeFile) {
  hzdt::TempDir d;
  const std::string path = d.path() + "/train.shard";
  const std::string a(1 << 16, 'a'), b(1 << 16, 'b');
  std::vector<pid_t> kids;
  for (const std::string* content : {&a, &b}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      for (int i = 0; i < 200; ++i) try {
          hz::write_file_atomic(path, *content);
        } catch (...) {
          rc = 1;
        }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed";
  }
  const std::string got = hzdt::read_bytes(path);
  EXPECT_TRUE(got == a || got == b) << "a mixed or truncated file of " << got.size() << " bytes";
  for (const auto& e : fs::directory_iterator(d.path()))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

// Nothing was fsync'd: a crash (power loss) after the journal's rename could find the journal naming
// files whose data never reached the disk. Every file is synced before the journal appears, the
// directory too, and the directory again after the set's renames, before the journal goes.
namespace {
struct Synced {
  std::string path;
  bool journal;  // the journal existed when the path was synced
};
std::vector<Synced>* g_synced = nullptr;
std::string g_dir;
void record_sync(const std::string& path) {
  g_synced->push_back({path, fs::exists(g_dir + "/.results.pending")});
}
}  // namespace

TEST(FileSet, EveryFileAndTheDirectoryAreSyncedBeforeTheJournal) {
  hzdt::TempDir d;
  std::vector<Synced> synced;
  g_synced = &synced;
  g_dir = d.path();
  hz::detail::on_file_synced = record_sync;
  hz::write_files_atomic(d.path(), {{"eval.json", "json"}, {"nll.csv", "csv"}});
  hz::detail::on_file_synced = nullptr;
  auto at = [&](const std::string& path, size_t from = 0) {
    for (size_t i = from; i < synced.size(); ++i)
      if (synced[i].path == path) return i;
    return synced.size();
  };
  std::string order;
  for (const auto& s : synced) order += s.path + (s.journal ? " (journal)\n" : "\n");
  const size_t a = at(d.path() + "/eval.json.set.tmp"), b = at(d.path() + "/nll.csv.set.tmp");
  const size_t dir = at(d.path(), std::max(a, b));
  ASSERT_LT(a, synced.size()) << order;
  ASSERT_LT(b, synced.size()) << order;
  ASSERT_LT(dir, synced.size()) << order;
  EXPECT_FALSE(synced[a].journal || synced[b].journal || synced[dir].journal) << order;
  // the journal's own temporary, synced before its rename, then the directory after it
  size_t journal = synced.size();
  for (size_t i = dir; i < synced.size(); ++i)
    if (synced[i].path.find("/.results.pending.tmp.") != std::string::npos) journal = i;
  ASSERT_LT(journal, synced.size()) << order;
  EXPECT_FALSE(synced[journal].journal) << order;
  // after the renames: the directory, while the journal still stands
  ASSERT_FALSE(synced.empty());
  EXPECT_EQ(synced.back().path, d.path()) << order;
  EXPECT_TRUE(synced.back().journal) << order;
  EXPECT_FALSE(fs::exists(d.path() + "/.results.pending"));
}

// A writer killed before it removed its temporary (SIGKILL, the OOM killer) left it in the data cache
// for good: the next writer of the file removes this host's temporaries whose process is gone, and
// leaves a running process's and another host's (a cache on a shared file system).
TEST(FileAtomic, AKilledWritersTemporaryIsRemovedByTheNextWriter) {
  hzdt::TempDir d;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // a pid no process holds now
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  const std::string path = d.path() + "/train.shard";
  const std::string dead = path + ".tmp." + host + "." + std::to_string(child) + ".0";
  const std::string live = path + ".tmp." + host + "." + std::to_string(getpid()) + ".999";
  const std::string other = path + ".tmp.another-host." + std::to_string(child) + ".0";
  for (const auto& p : {dead, live, other}) std::ofstream(p) << "partial";
  hz::write_file_atomic(path, "whole");
  EXPECT_EQ(hzdt::read_bytes(path), "whole");
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
}
