// core/file.h: a result set is replaced whole or not at all (issue 36: an interrupted evaluation
// left a new eval.json beside the previous nll_by_position.csv).
#include <gtest/gtest.h>
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
