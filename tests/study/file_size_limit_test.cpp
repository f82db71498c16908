// A write past RLIMIT_FSIZE (ulimit -f) killed horizon with SIGXFSZ, without a message, and left the
// shard's temporary in the data cache for good. horizon ignores SIGXFSZ at start, so the write fails
// with EFBIG: exit 1 with a message naming the file and the limit, and the temporary removed.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/train/train_test_util.h"

namespace fs = std::filesystem;

TEST(FileSizeLimit, DataPrepareRefusesNamingTheFileAndLeavesNoTemporary) {
  const std::string hz_bin = fs::read_symlink("/proc/self/exe").parent_path().string() + "/horizon";
  if (!fs::exists(hz_bin)) GTEST_SKIP() << "build/horizon not built";
  const std::string root = hz::test::make_tmp_dir("hz_fsize_test");
  {
    std::ofstream text(root + "/corpus.txt");
    for (int i = 0; i < 4000; ++i) text << "In the beginning God created the heaven and the earth. " << i << "\n";
  }
  const std::string recipe = root + "/r.yaml";
  std::ofstream(recipe) << "run: {name: fsize, out_dir: " << root << "}\nmodel: {d_model: 16, n_layers: 1, n_heads: 2}\n"
                        << "data: {source: files, files: [" << root << "/corpus.txt], seq_len: 32, cache_dir: " << root
                        << "/cache}\n";
  const std::string err = root + "/err.txt";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    dup2(fd, 1);
    signal(SIGXFSZ, SIG_DFL);  // as a shell leaves it: the default kills
    rlimit lim{64 << 10, 64 << 10};  // the shard holds ~240 KB of tokens
    setrlimit(RLIMIT_FSIZE, &lim);
    execl(hz_bin.c_str(), hz_bin.c_str(), "data", "prepare", recipe.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::ifstream ef(err);
  const std::string out((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find(root + "/cache/train.shard"), std::string::npos) << out;
  EXPECT_NE(out.find("file size limit (ulimit -f)"), std::string::npos) << out;
  ASSERT_TRUE(fs::is_directory(root + "/cache")) << out;
  for (const auto& e : fs::directory_iterator(root + "/cache"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  fs::remove_all(root);
}
