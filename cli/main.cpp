// Horizon: the command-line entry point. Library errors become exit codes here and only here:
// 0 success, 1 a usage or input error (bad recipe, missing file, impossible config), 2 bad
// command line, 3 an internal error.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "attention/accounting.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/convert.h"
#include "cli/tokenize.h"
#include "core/device.h"
#include "core/version.h"
#include "core/error.h"
#include "data/shard.h"
#include "distributed/communicator.h"
#include "distributed/context/layout.h"
#include "eval/eval.h"
#include "eval/lm_eval_export.h"
#include "cli/flags.h"
#include "study/evaluate_run.h"
#include "study/hf_models.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/recipe.h"
#include "train/context_parallel.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace fs = std::filesystem;


namespace {

// Bounded spinning for the OpenMP threads. At the end of every parallel region libgomp's threads
// spin 300,000 times by default before sleeping: on a machine shared with one other busy process
// the preempted thread holds the others up for its whole time slice, and Horizon's quickstart ran
// at 20% of its quiet throughput; with 3,000 spins it kept 47% (the fair half) and lost nothing
// alone (2-core Xeon; scripts/bench/bench_train.sh's busy row). libgomp reads its environment when
// it is loaded, before main(), so the setting takes one re-execution of this program (same pid,
// arguments and descriptors, a few milliseconds). OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the
// user win; if the re-execution fails the program goes on with the runtime's default.
void bound_omp_spinning(char** argv) {
#ifdef __linux__
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  setenv("GOMP_SPINCOUNT", "3000", 1);
  setenv("HZ_GOMP_SPINCOUNT_DEFAULTED", "1", 1);  // so that `horizon info` can say whose setting it is
  execv("/proc/self/exe", argv);
  unsetenv("GOMP_SPINCOUNT");  // still here: exec failed; GOMP_SPINCOUNT would mislead the report
  unsetenv("HZ_GOMP_SPINCOUNT_DEFAULTED");
#else
  (void)argv;
#endif
}

void usage() {
  fmt::print("{}",
      "horizon — long-context position-encoding research framework\n\n"
      "usage: horizon <command> [args]\n\n"
      "commands:\n"
      "  train RECIPE.yaml [key.path=value ...]   train (or resume) a run; writes runs/<run.name>/\n"
      "  eval RUN_DIR|CHECKPOINT [key=value ...]  loss / perplexity vs length, NLL by position\n"
      "  data prepare RECIPE.yaml [key=value ...] tokenize the recipe's corpus into shards\n"
      "  info [RECIPE.yaml|RUN_DIR] [key=value]   build, parameters, per-layer attention, FLOPs\n"
      "  generate RUN_DIR --prompt TEXT [...]     decode with the KV cache (greedy or sampled)\n"
      "  sweep GRID.yaml                          train + evaluate a recipe over a grid (resumable)\n"
      "  report RUN_DIR... -o DIR                 markdown page with tables and PNG plots\n"
      "  simulate order-awareness [...]           SCOPE's order-awareness simulation\n"
      "  longrope-search RUN --length L [...]     LongRoPE's search for per-pair RoPE factors at L\n"
      "  bench train|attention|optimizer|generate|tokenizer [...]  benchmarks (horizon bench --help)\n"
      "  tokenize TOKENIZER [FILE] [--decode]     ids of a text (or text of ids) with byte / tokenizer.json / .model\n"
      "  convert hf HF_DIR OUT.h5                 import a Hugging Face Llama/Mistral/Qwen2/SmolLM3 checkpoint\n"
      "  convert to-hf CKPT|RUN_DIR OUT_DIR       export to a Hugging Face directory (transformers)\n"
      "  score MODEL FILE [--json] [--bos]        mean NLL of FILE's tokens 2..n given their prefix\n"
      "  train --schema                           every recipe field with its default and meaning\n"
      "  <command> --help                         help of a command\n");
}

bool wants_help(const std::vector<std::string>& a) {
  for (const auto& s : a)
    if (s == "--help" || s == "-h") return true;
  return false;
}

// The ranks of this job (mpirun, or for NCCL ranks without MPI a launcher's variables: Horizon's,
// torchrun's or an srun step's; distributed/communicator.h); a single process outside them. CUDA ranks communicate over NCCL, CPU ranks over MPI.
std::unique_ptr<hz::dist::Communicator> ranks_communicator(hz::DeviceType device) {
  const bool ranks = hz::dist::launched_by_mpirun() || hz::dist::launched_by_env();
  return ranks && device == hz::DeviceType::CUDA ? hz::dist::make_nccl() : hz::dist::from_environment();
}

// Runs fn on every rank, then waits for all of them. A rank that fails takes the whole job down
// (no hangs): it prints "horizon: rank R of N: error: ..." and aborts; a single process rethrows.
template <class Fn>
int on_every_rank(hz::dist::Communicator& comm, Fn&& fn) {
  try {
    fn();
    comm.barrier();
  } catch (const std::exception& e) {
    if (comm.size() == 1) throw;
    fmt::print(stderr, "horizon: rank {} of {}: error: {}\n", comm.rank(), comm.size(), e.what());
    std::fflush(stderr);
    comm.abort(1);
  }
  return 0;
}

int cmd_train(const std::vector<std::string>& a) {
  if (a.size() >= 2 && a[1] == "--schema") {
    fmt::print("{}", hz::train::recipe_schema());
    return 0;
  }
  if (a.size() < 2 || wants_help(a)) {
    fmt::print("{}", "usage: horizon train RECIPE.yaml [key.path=value ...]\n"
               "  Overrides take precedence over the file (e.g. train.steps=100 model.n_layers=2).\n"
               "  Resume with checkpoint.resume=latest; see horizon train --schema for every field.\n");
    return a.size() < 2 ? 2 : 0;
  }
  // Under mpirun every rank runs this; a failing rank takes the whole job down (no hangs). CUDA
  // ranks all-reduce with NCCL (bootstrapped over MPI, or without mpirun from torchrun's, srun's or
  // Horizon's variables and a TCP rendezvous or id file: there a failing rank ends only itself; the
  // launcher ends the rest), CPU ranks with MPI.
  const hz::train::Recipe r = hz::study::load_recipe(a[1], std::vector<std::string>(a.begin() + 2, a.end()));
  std::unique_ptr<hz::dist::Communicator> comm = ranks_communicator(r.run.device);
  return on_every_rank(*comm, [&] {
    hz::train::TrainOptions opt;
    opt.comm = comm.get();
    opt.before_step = hz::train::fault_injection_from_env();
    const auto res = hz::study::train(r, opt);  // checkpoint.init_from may name a Hugging Face directory
    if (comm->rank() == 0) fmt::print("run directory: {}\n", res.run_dir);
  });
}

// horizon eval RUN --export-lm-eval DIR: the needle grid the run's recipe (with the overrides) asks
// for, as lm-eval-harness tasks (eval/lm_eval_export.h); the run is loaded, as horizon eval loads
// it, for its recipe: its tokenizer, seed and lengths make the examples.
int export_lm_eval(const std::string& target, const std::vector<std::string>& overrides, const std::string& dir) {
  const hz::study::LoadedRun run = hz::study::load_run(target, overrides);
  const hz::eval::EvalOptions eo = run.recipe.eval_options();
  const hz::eval::LmEvalExport ex = hz::eval::needle_lm_eval_files(eo);
  std::error_code ec;
  fs::create_directories(dir, ec);
  HZ_CHECK(!ec && fs::is_directory(dir), hz::ValueError, dir, ": cannot make the lm-eval task folder",
           ec ? ": " + ec.message() : std::string(" (a file of that name is in the way)"));
  hz::write_files_atomic(dir, ex.files);
  for (const auto& s : ex.skipped) fmt::print("skipped: {}\n", s);
  fmt::print("wrote {} needle examples of {} as lm-eval tasks {} (group {}) to {}\n"
             "run them (max_length: the longest length, so lm-eval cuts no prompt):\n"
             "  lm_eval run --model hf --model_args pretrained=HF_EXPORT,trust_remote_code=True,max_length={} \\\n"
             "    --tasks {} --include_path {} --log_samples --output_path OUT\n",
             ex.examples, target, fmt::join(ex.tasks, ", "), hz::eval::kLmEvalNeedleGroup, dir,
             *std::max_element(eo.lengths.begin(), eo.lengths.end()), hz::eval::kLmEvalNeedleGroup, dir);
  return 0;
}

int cmd_eval(const std::vector<std::string>& a) {
  if (a.size() < 2 || wants_help(a)) {
    fmt::print("{}", "usage: horizon eval RUN_DIR|CHECKPOINT.h5 [key=value ...]\n"
               "  Overrides apply to the run's recipe, e.g. eval.lengths=[256,512,1024]\n"
               "  eval.rope_scaling=yarn  eval.swan_a=362  eval.drope_c=0.4  eval.fit_drope_c=[0,0.2,0.4]\n"
               "  eval.lampe=true  eval.batches=8  eval.fit_swan_a=[64,362]  eval.probe_sequences=16\n"
               "  eval.needle_tasks=[passkey,niah_multikey_1] eval.needle_samples=5 eval.needle_format=short\n"
               "  eval.needle_per_example=true (every needle example's output: needles_examples.jsonl)\n"
               "  eval.retrieval_heads=true (each attention head's retrieval score on the needles and the passkey grid: retrieval_heads.csv)\n"
               "  Writes eval.csv, eval.json, nll_by_position.csv, eval_recipe.yaml (the recipe with these overrides;\n"
               "  horizon report names the run by it) (+ needles, probes, fits) to the run dir, replacing the\n"
               "  previous evaluation's results whole (its files this one does not write are removed).\n"
               "  --export-lm-eval DIR: evaluate nothing; write the needle grid these overrides ask for (the same\n"
               "  examples) as lm-eval-harness tasks to DIR (group horizon_needles; docs/needles.md).\n"
               "  --all-checkpoints: evaluate every kept checkpoint of RUN_DIR, oldest first (the results files end\n"
               "  with the latest's; retrieval_heads.csv holds every checkpoint's heads, by step).\n"
               "  mpirun -np N horizon eval ...: each sequence split over the N ranks (lengths one rank cannot hold).\n");
    return a.size() < 2 ? 2 : 0;
  }
  const hz::cli::Flags f = hz::cli::parse_flags(a, {"export-lm-eval"}, {"all-checkpoints"});
  HZ_CHECK(!f.positional.empty(), hz::ValueError, "horizon eval: no run directory or checkpoint given; see --help");
  const std::vector<std::string> overrides(f.positional.begin() + 1, f.positional.end());
  if (f.has("export-lm-eval")) return export_lm_eval(f.positional[0], overrides, f.get("export-lm-eval"));
  // the checkpoints to evaluate: the one given (a run directory: its latest), or every kept one
  std::vector<std::string> targets{f.positional[0]};
  if (f.has("all-checkpoints")) {
    HZ_CHECK(fs::is_directory(f.positional[0]), hz::ValueError, "horizon eval --all-checkpoints: '", f.positional[0],
             "' is not a run directory");
    targets = hz::train::list_checkpoints(f.positional[0] + "/checkpoints");
    HZ_CHECK(!targets.empty(), hz::ValueError, "no checkpoint in '", f.positional[0], "/checkpoints'; train first");
  }
  // Under mpirun -np N every rank loads the run and each evaluated sequence is split over the N
  // ranks (context parallelism); rank 0 prints and writes the results.
  hz::study::LoadedRun run = hz::study::load_run(targets[0], overrides);
  std::unique_ptr<hz::dist::Communicator> comm = ranks_communicator(run.recipe.run.device);
  const bool lead = comm->rank() == 0;
  std::vector<hz::eval::RetrievalHead> retrieval;  // every evaluated checkpoint's, by step
  return on_every_rank(*comm, [&] {
    for (size_t i = 0; i < targets.size(); ++i) {
      if (i > 0) run = hz::study::load_run(targets[i], overrides);
      if (lead)
        fmt::print("evaluating {} (step {}), trained at length {}{}\n", run.checkpoint, run.step, run.recipe.data.seq_len,
                   comm->size() > 1 ? fmt::format(", each sequence split over {} ranks", comm->size()) : "");
      const std::string tables = hz::study::evaluate_run(run, true, comm.get(), &retrieval);
      if (lead)
        fmt::print("{}{}\n", tables,
                   run.results_written ? "wrote the results to " + run.run_dir
                                       : run.run_dir + " is read-only: the results above were not written");
    }
  });
}

int cmd_data(const std::vector<std::string>& a) {
  if (a.size() < 3 || a[1] != "prepare" || wants_help(a)) {
    fmt::print("{}", "usage: horizon data prepare RECIPE.yaml [key=value ...]\n"
               "  Tokenizes the recipe's corpus (data.source) into train/val shards in data.cache_dir.\n");
    return wants_help(a) ? 0 : 2;
  }
  const hz::train::Recipe r = hz::study::load_recipe(a[2], std::vector<std::string>(a.begin() + 3, a.end()));
  const auto [tp, vp] = hz::train::prepare_data(r, true);
  const auto t = hz::data::Shard::open(tp), v = hz::data::Shard::open(vp);
  fmt::print("train: {} ({} docs, {} tokens)\nval:   {} ({} docs, {} tokens)\n", tp, t->n_docs(), t->n_tokens(), vp,
             v->n_docs(), v->n_tokens());
  fmt::print("meta:  {}\n", fs::path(tp).parent_path().string() + "/meta.json");
  return 0;
}


}  // namespace

namespace {
int dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  const std::string& cmd = args[0];
  if (cmd == "train") return cmd_train(args);
  if (cmd == "eval") return cmd_eval(args);
  if (cmd == "data") return cmd_data(args);
  if (cmd == "info") return hz::cli::info_main(args);
  if (cmd == "tokenize") return hz::cli::tokenize_main(args);
  if (cmd == "bench") return hz::cli::bench_main(args);
  if (cmd == "convert") return hz::cli::convert_main(args);
  if (cmd == "score") return hz::cli::score_main(args);
  if (cmd == "generate") return hz::cli::generate_main(args);
  if (cmd == "simulate") return hz::cli::simulate_main(args);
  if (cmd == "longrope-search") return hz::cli::longrope_main(args);
  if (cmd == "sweep") return hz::cli::sweep_main(args);
  if (cmd == "report") return hz::cli::report_main(args);
  fmt::print(stderr, "horizon: unknown command '{}'; see horizon --help\n", cmd);
  return 2;
}

// Standard output that could not be written (`> /dev/full`, a closed pipe's disk): an input error
// (exit 1) naming the reason, never an internal error or a silent exit 0 with nothing written.
// err: errno when the failure was seen (fmt throws std::system_error with errno set); fflush's own
// errno replaces it when the final flush is what fails.
bool stdout_failed(int& err) {
  errno = 0;
  if (std::fflush(stdout) != 0) err = errno;
  return std::ferror(stdout);
}
int stdout_error(int err) {
  fmt::print(stderr, "horizon: error: cannot write to standard output: {}\n",
             err ? std::strerror(err) : "write error");
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  // A write past RLIMIT_FSIZE (ulimit -f) fails with EFBIG, which every writer turns into an error
  // naming the file (and removes its temporary), instead of SIGXFSZ killing the process without a word
  std::signal(SIGXFSZ, SIG_IGN);
  bound_omp_spinning(argv);
  // progress lines go out one by one also when stdout is a file or a pipe (nohup, mpirun, batch jobs)
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int rc = 0;
  try {
    rc = dispatch(argc, argv);
  } catch (const hz::Error& e) {
    int err = errno;
    if (stdout_failed(err)) return stdout_error(err);
    fmt::print(stderr, "horizon: error: {}\n", e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {  // a path the user gave that cannot be used
    fmt::print(stderr, "horizon: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    int err = errno;
    if (stdout_failed(err)) return stdout_error(err);
    fmt::print(stderr, "horizon: internal error: {}\n", e.what());
    return 3;
  }
  int err = errno;
  if (stdout_failed(err)) return stdout_error(err);
  return rc;
}
