// Issue 19: a corpus too small for the batch is refused naming the files the user gave (the
// .bin token files), not only the prepared cache shard.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "distributed/communicator.h"
#include "train/data.h"
#include "train/recipe.h"

namespace fs = std::filesystem;

TEST(TrainDataNames, TooSmallCorpusNamesTheTokenFiles) {
  char t[] = "/tmp/hz_data_names_XXXXXX";
  const std::string dir = mkdtemp(t);
  const std::string bin = dir + "/tiny.bin";
  {
    std::ofstream out(bin, std::ios::binary);
    for (int i = 0; i < 300; ++i) {  // nanoGPT: raw uint16 ids below the byte tokenizer's vocabulary
      const uint16_t v = static_cast<uint16_t>(65 + i % 26);
      out.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
  const std::string yaml = "data:\n  source: tokens\n  files: [" + bin +
                           "]\n  token_format: nanogpt\n  seq_len: 64\n  batch_size: 32\n  cache_dir: " + dir +
                           "/cache\n";
  const hz::train::Recipe r = hz::train::parse_recipe(yaml, "tiny");
  auto comm = hz::dist::make_local();
  try {
    (void)hz::train::open_train_data(r, *comm, false);
    ADD_FAILURE() << "accepted";
  } catch (const hz::ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(bin), std::string::npos) << msg;
    EXPECT_NE(msg.find("too small"), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}
