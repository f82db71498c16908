// Horizon: `horizon longrope-search RUN --length L [...]` — LongRoPE's evolutionary search for
// per-pair RoPE rescale factors on a trained run (study/longrope_search.h), written as LongRoPE's
// factor file that eval.longrope_long_factors=FILE reads.
#include <fmt/core.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/file.h"
#include "data/shard.h"
#include "study/load_run.h"
#include "study/longrope_search.h"
#include "train/data.h"

namespace hz::cli {

int longrope_main(const std::vector<std::string>& a) {
  const bool help = a.size() > 1 && (a[1] == "--help" || a[1] == "-h");
  if (a.size() < 2 || help) {
    fmt::print("{}",
        "usage: horizon longrope-search RUN_DIR|CHECKPOINT --length L [--population 16] [--generations 6]\n"
        "                               [--parents 4] [--batches N] [--sigma 0.25] [--max-factor F] [--seed 1]\n"
        "                               [--out FILE] [key=value ...]\n"
        "  LongRoPE's search (arXiv 2402.13753): per-pair rescale factors lambda_m of the run's RoPE layers,\n"
        "  1 <= lambda_m <= F (1.25 L / train_len unless given), non-decreasing over the pairs, minimising\n"
        "  the held-out loss at length L on N validation batches (eval.batches unless given; the same for every\n"
        "  candidate), taken after the eval.batches that horizon eval reports, so those stay unselected-on.\n"
        "  The first population holds PI, NTK-aware and YaRN's factors; the best per generation survive.\n"
        "  Writes LongRoPE's factor file ({long_factor, short_factor, the losses}; default\n"
        "  RUN_DIR/longrope_L.json), which eval.rope_scaling=longrope eval.longrope_long_factors=FILE applies.\n");
    return help ? 0 : 2;
  }
  const Flags f = parse_flags(a, {"length", "population", "generations", "parents", "sigma", "max-factor", "seed", "out", "batches"});
  HZ_CHECK(!f.positional.empty(), ValueError, "longrope-search: name a run directory or checkpoint; see --help");
  HZ_CHECK(f.has("length"), ValueError, "longrope-search: --length L (the target evaluation length) is required");
  study::LongRopeSearchOptions o;
  o.length = f.geti("length", 0, 2, int64_t{1} << 24);
  o.population = f.geti("population", o.population, 2, 4096);
  o.generations = f.geti("generations", o.generations, 1, 4096);
  o.parents = f.geti("parents", o.parents, 1, 4095);
  o.batches = f.geti("batches", 0, 0, 1 << 20);
  o.sigma = f.getd("sigma", o.sigma, 1e-6, 10.0);
  o.max_factor = f.getd("max-factor", 0.0, 0.0, 1e6);
  o.seed = static_cast<uint64_t>(f.geti("seed", 1, 0));
  const std::vector<std::string> overrides(f.positional.begin() + 1, f.positional.end());
  study::LoadedRun run = study::load_run(f.positional[0], overrides);
  HZ_CHECK(!train::is_synthetic(run.recipe.data.source), ValueError, "longrope-search: the run trained on synthetic '",
           train::name(run.recipe.data.source), "' data, which has no held-out text to score candidates on");
  const auto val = data::Shard::open(train::prepare_data(run.recipe, false).second);
  const eval::EvalOptions eo = run.recipe.eval_options();
  fmt::print("LongRoPE search on {} (step {}): length {} = {:.2f} x the training length {}, population {}, {} "
             "generations, {} validation batch(es) of {} sequences after the {} horizon eval scores\n",
             run.checkpoint, run.step, o.length, static_cast<double>(o.length) / eo.train_len, eo.train_len,
             o.population, o.generations, o.batches > 0 ? o.batches : eo.batches, eo.batch_size, eo.batches);
  const study::LongRopeSearchResult r = study::longrope_search(*run.model, *val, eo, o);
  fmt::print("held-out loss at {} (nats/token): as trained {:.4f}, PI {:.4f}, YaRN {:.4f}\n", o.length, r.loss_none,
             r.loss_pi, r.loss_yarn);
  for (size_t g = 0; g < r.best_per_generation.size(); ++g)
    fmt::print("  generation {:>3}: best {:.4f}\n", g + 1, r.best_per_generation[g]);
  fmt::print("searched factors ({} candidates): {:.4f}\n  lambda:", r.evaluated, r.best.loss);
  for (double x : r.best.factors) fmt::print(" {:.3f}", x);
  const std::string out = f.get("out", run.run_dir + "/longrope_" + std::to_string(o.length) + ".json");
  write_file_atomic(out, study::longrope_json(r, o));
  fmt::print("\nwrote {}\n  apply: horizon eval {} eval.rope_scaling=longrope eval.longrope_long_factors={}\n", out,
             f.positional[0], out);
  return 0;
}

}  // namespace hz::cli
