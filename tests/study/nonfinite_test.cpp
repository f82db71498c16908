// A model whose weights are not finite gives no numbers: loading it is refused naming the tensor
// (issue 36), and a model whose finite weights overflow in the forward pass is refused by horizon eval
// (evaluate_run), horizon score and horizon generate (exit 1) through one check, instead of reporting
// mean_nll: -nan (issue 19) or printing NUL bytes (generate), with exit 0.
#include <gtest/gtest.h>

#include "tests/train/train_test_util.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "study/evaluate_run.h"
#include "study/load_run.h"
#include "train/checkpoint.h"
#include "train/recipe.h"
#include "train/trainer.h"

using namespace hz;
namespace fs = std::filesystem;

TEST(NonFinite, EvalAndScoreRefuseNaNWeights) {
  const std::string root = test::make_tmp_dir("hz_nonfinite_test");
  const train::Recipe r = train::parse_recipe(
      "run: {name: ok, out_dir: " + root + "}\nmodel:\n  d_model: 32\n  n_layers: 1\n  n_heads: 2\n"
      "data: {seq_len: 32, batch_size: 2, cache_dir: " + root + "/data}\ntrain: {steps: 2, log_every: 1}\n"
      "schedule: {warmup_steps: 0}\neval: {every: 0, batches: 1, lengths: [32]}\n",
      "tiny.yaml");
  train::TrainOptions opt;
  opt.quiet = true;
  train::train(r, opt);
  const std::string good = train::find_latest_checkpoint(root + "/ok/checkpoints");
  ASSERT_FALSE(good.empty());
  train::CheckpointData ck = train::load_checkpoint(good);
  Tensor& w = ck.model.begin()->second;
  const float w0 = w.data<float>()[0];
  w.data<float>()[0] = std::nanf("");
  const std::string nan_ckpt = root + "/nan/checkpoints/step_2.h5";
  train::save_checkpoint(nan_ckpt, ck);
  try {
    (void)study::load_run(nan_ckpt, {});
    FAIL() << "a NaN weight was loaded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(nan_ckpt), std::string::npos) << m;
    EXPECT_NE(m.find("'" + ck.model.begin()->first + "'): element 0"), std::string::npos) << m;
  }
  // finite weights whose forward pass overflows (the final norm's gains near FLT_MAX: logits of +-inf)
  w.data<float>()[0] = w0;
  Tensor& g = ck.model.at("norm.weight");
  for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = 3e38f;
  const std::string bad = root + "/big/checkpoints/step_2.h5";
  train::save_checkpoint(bad, ck);

  study::LoadedRun run = study::load_run(bad, {});
  try {
    study::evaluate_run(run, false);
    FAIL() << "a NaN model was evaluated";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(bad), std::string::npos) << m;
    EXPECT_NE(m.find("not finite"), std::string::npos) << m;
    EXPECT_NE(m.find("non-finite weights"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(root + "/big/eval.json"));

  // horizon sits beside this test binary in the build folder
  const std::string hz_bin = fs::read_symlink("/proc/self/exe").parent_path().string() + "/horizon";
  if (!fs::exists(hz_bin)) GTEST_SKIP() << "build/horizon not built";
  std::ofstream(root + "/text.txt") << "In the beginning God created the heaven and the earth.";
  const std::string cmd = hz_bin + " score " + bad + " " + root + "/text.txt > " + root + "/score.out 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  std::ifstream f(root + "/score.out");
  const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("not finite"), std::string::npos) << out;
  EXPECT_NE(out.find(bad), std::string::npos) << out;
  // horizon generate refuses the same model through the same check (it printed NUL bytes, the argmax of
  // NaN logits, and exited 0)
  const int grc = std::system((hz_bin + " generate " + bad + " --prompt 'In the' --max-new-tokens 4 > " + root +
                               "/gen.out 2> " + root + "/gen.err").c_str());
  ASSERT_TRUE(WIFEXITED(grc));
  EXPECT_EQ(WEXITSTATUS(grc), 1);
  std::ifstream go(root + "/gen.out"), ge(root + "/gen.err");
  const std::string gout((std::istreambuf_iterator<char>(go)), std::istreambuf_iterator<char>());
  const std::string gerr((std::istreambuf_iterator<char>(ge)), std::istreambuf_iterator<char>());
  EXPECT_EQ(gout.find('\0'), std::string::npos) << "NUL bytes printed";
  EXPECT_NE(gerr.find("not finite"), std::string::npos) << gerr;
  EXPECT_NE(gerr.find("non-finite weights or outputs"), std::string::npos) << gerr;
  EXPECT_NE(gerr.find(bad), std::string::npos) << gerr;
  fs::remove_all(root);
}
