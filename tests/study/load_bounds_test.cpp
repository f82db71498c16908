// Loading a run for evaluation reads what evaluation needs and checks what the file declares before
// allocating: the model's tensors only (not the optimizer state), and only when their shapes are
// those of the model the checkpoint's own recipe builds (hardening, third round).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/process.h"
#include "io/hdf5.h"
#include "study/load_run.h"
#include "tests/train/checkpoint_hole.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/recipe.h"
#include "train/trainer.h"

using namespace hz;
namespace fs = std::filesystem;
namespace h5 = hz::io::h5;

using hz::test::add_hole;  // tests/train/checkpoint_hole.h

TEST(LoadBounds, EvaluationReadsTheModelOnlyAndChecksItsShapesFirst) {
  const std::string root = test::make_tmp_dir("hz_load_bounds_test");
  const train::Recipe r = train::parse_recipe(
      "run: {name: ok, out_dir: " + root + "}\nmodel:\n  d_model: 32\n  n_layers: 1\n  n_heads: 2\n"
      "data: {seq_len: 32, batch_size: 2, cache_dir: " + root + "/data}\ntrain: {steps: 1, log_every: 1}\n"
      "schedule: {warmup_steps: 0}\neval: {every: 0, final: false, batches: 1, lengths: [32]}\n",
      "tiny.yaml");
  train::TrainOptions topt;
  topt.quiet = true;
  train::train(r, topt);
  const std::string good = train::find_latest_checkpoint(root + "/ok/checkpoints");
  ASSERT_FALSE(good.empty());

  // 1 GiB never written in /optimizer (a few hundred KB on disk): an evaluation reads no optimizer
  // state, so it loads the run and stays small (it used to reach 2.27 GB, then refused the file)
  const std::string hole = root + "/hole/checkpoints/step_1.h5";
  fs::create_directories(fs::path(hole).parent_path());
  fs::copy_file(good, hole);
  add_hole(hole, "optimizer", "adamw/huge/exp_avg", int64_t{1} << 30);
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // alone in a process, so that its peak memory is this load's
    alarm(60);
    const int64_t base = resident_bytes();
    int code = 0;
    try {
      const study::LoadedRun lr = study::load_run(hole, {});
      rusage self{}, kids{};
      getrusage(RUSAGE_SELF, &self);
      getrusage(RUSAGE_CHILDREN, &kids);
      if (lr.step != 1) code = 2;
      else if (std::max(self.ru_maxrss, kids.ru_maxrss) * 1024 - base > (256 << 20)) code = 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "refused: %s\n", e.what());
      code = 4;
    }
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: wrong step, 3: over 256 MiB resident, 4: refused";

  // a model tensor declared larger than the recipe's model has it: refused naming the parameter,
  // before the file's tensors are read
  train::CheckpointData ck = train::load_checkpoint(good);
  const std::string name = ck.model.begin()->first;
  ck.model[name] = Tensor::zeros({1024, 1024}, DType::F32);
  const std::string wrong = root + "/wrong/checkpoints/step_1.h5";
  train::save_checkpoint(wrong, ck);
  try {
    (void)study::load_run(wrong, {});
    ADD_FAILURE() << "accepted";
  } catch (const hz::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(wrong), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter '" + name + "' is stored with shape (1024, 1024)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the checkpoint's own recipe builds"), std::string::npos) << msg;
  }
  fs::remove_all(root);
}
