#include "study/longrope_search.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "eval/eval.h"

namespace hz::study {

namespace {

// The held-out loss at eo.lengths[0] with the given inference options (the same batches each call).
double loss_with(nn::Transformer& m, const data::Shard& val, eval::EvalOptions eo, const eval::InferenceOptions& inf) {
  eo.inference = inf;
  const eval::EvalReport r = eval::evaluate(m, val, eo, false);
  HZ_CHECK(!r.lengths.empty(), Error, "longrope search: the evaluation returned no length");
  return r.lengths.at(0).loss;
}

// LongRoPE's constraints: lambda non-decreasing over the pairs, within [1, hi].
void constrain(std::vector<double>& f, double hi) {
  double run = 1.0;
  for (double& x : f) {
    run = std::max(run, std::min(std::max(x, 1.0), hi));
    x = run;
  }
}

double unit(Generator& g) { return g.uniform({1}, 0.0, 1.0, DType::F64).to_vector()[0]; }
double gauss(Generator& g) { return g.normal({1}, 0.0, 1.0, DType::F64).to_vector()[0]; }

}  // namespace

LongRopeSearchResult longrope_search(nn::Transformer& m, const data::Shard& val, eval::EvalOptions eo,
                                     const LongRopeSearchOptions& o) {
  const int64_t C = eo.train_len, L = o.length, D = m.cfg.hdim(), half = D / 2;
  HZ_CHECK(L > C, ValueError, "longrope search: the target length (", L, ") must exceed the training length (", C,
           "); LongRoPE's long factors apply beyond it");
  HZ_CHECK(o.population >= 2 && o.generations >= 1 && o.parents >= 1 && o.parents < o.population, ValueError,
           "longrope search: population (", o.population, ") >= 2, generations (", o.generations, ") >= 1 and parents (",
           o.parents, ") in [1, population)");
  HZ_CHECK(o.sigma > 0 && std::isfinite(o.sigma), ValueError, "longrope search: sigma must be positive");
  bool rope = false;
  double base = 10000.0;
  for (const auto& b : m.layers)
    if (b->attn->spec.pos.kind == attn::PosKind::Rope) {
      rope = true;
      base = b->attn->spec.pos.rope_base;
    }
  HZ_CHECK(rope, ValueError, "longrope search: the model has no RoPE layer to rescale");
  const double s = static_cast<double>(L) / static_cast<double>(C);
  const double hi = o.max_factor > 0 ? o.max_factor : 1.25 * s;
  HZ_CHECK(hi >= 1.0, ValueError, "longrope search: max_factor must be >= 1");
  // every measurement but the loss off: the same validation batches for every candidate
  eo.lengths = {L};
  eo.skip_batches = eo.batches;  // the report's batches stay unseen by the selection
  eo.batches = o.batches > 0 ? o.batches : eo.batches;
  eo.fit_drope_c.clear();
  eo.fit_swan_a.clear();
  eo.passkey_examples = 0;
  eo.needles.tasks.clear();
  eo.probe_sequences = 0;

  LongRopeSearchResult res;
  res.length = L;
  res.train_len = C;
  eval::InferenceOptions inf;
  res.loss_none = loss_with(m, val, eo, inf);
  inf.rope_scaling = attn::RopeScaling::PI;
  res.loss_pi = loss_with(m, val, eo, inf);
  inf.rope_scaling = attn::RopeScaling::YaRN;
  res.loss_yarn = loss_with(m, val, eo, inf);

  auto score = [&](std::vector<double> f) {
    constrain(f, hi);
    eval::InferenceOptions li;
    li.rope_scaling = attn::RopeScaling::LongRoPE;
    li.longrope_long_factors = f;
    ++res.evaluated;
    return LongRopeCandidate{f, loss_with(m, val, eo, li)};
  };
  // the first population: PI, NTK-aware, YaRN's ramp, then mutations of them
  std::vector<std::vector<double>> seeds;
  seeds.emplace_back(half, s);
  std::vector<double> ntk(half), yarn(half);
  const double a = std::pow(s, static_cast<double>(D) / static_cast<double>(D - 2));
  for (int64_t i = 0; i < half; ++i) {
    ntk[i] = std::pow(a, 2.0 * static_cast<double>(i) / static_cast<double>(D));
    const double wavelength = 2.0 * M_PI * std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(D));
    const double g = std::clamp((static_cast<double>(C) / wavelength - 1.0) / (32.0 - 1.0), 0.0, 1.0);
    yarn[i] = 1.0 / ((1.0 - g) / s + g);
  }
  seeds.push_back(ntk);
  seeds.push_back(yarn);
  Generator g(o.seed, 0x4c6f6e67526f5045ull);  // "LongRoPE"
  auto mutate = [&](std::vector<double> f) {
    for (double& x : f)
      if (unit(g) < 0.3) x *= std::exp(o.sigma * gauss(g));
    return f;
  };
  std::vector<LongRopeCandidate> pop;
  for (int64_t i = 0; i < o.population; ++i)
    pop.push_back(score(i < static_cast<int64_t>(seeds.size()) ? seeds[i] : mutate(seeds[i % seeds.size()])));
  auto by_loss = [](const LongRopeCandidate& x, const LongRopeCandidate& y) { return x.loss < y.loss; };
  std::stable_sort(pop.begin(), pop.end(), by_loss);
  res.best_per_generation.push_back(pop.front().loss);
  for (int64_t gen = 1; gen < o.generations; ++gen) {
    pop.resize(o.parents);
    for (int64_t c = 0; static_cast<int64_t>(pop.size()) < o.population; ++c) {
      const std::vector<double>& p1 = pop[c % o.parents].factors;
      std::vector<double> child = p1;
      if (o.parents > 1 && unit(g) < 0.5) {  // crossover: each factor from one of two parents
        const std::vector<double>& p2 = pop[(c + 1 + static_cast<int64_t>(unit(g) * (o.parents - 1))) % o.parents].factors;
        for (int64_t i = 0; i < half; ++i)
          if (unit(g) < 0.5) child[i] = p2[i];
      }
      pop.push_back(score(mutate(child)));
    }
    std::stable_sort(pop.begin(), pop.end(), by_loss);
    res.best_per_generation.push_back(pop.front().loss);
  }
  res.best = pop.front();
  return res;
}

std::string longrope_json(const LongRopeSearchResult& r, const LongRopeSearchOptions& o) {
  nlohmann::json j;
  j["long_factor"] = r.best.factors;
  j["short_factor"] = std::vector<double>(r.best.factors.size(), 1.0);
  j["original_max_position_embeddings"] = r.train_len;
  j["length"] = r.length;
  j["loss"] = r.best.loss;
  j["loss_as_trained"] = r.loss_none;
  j["loss_pi"] = r.loss_pi;
  j["loss_yarn"] = r.loss_yarn;
  j["best_per_generation"] = r.best_per_generation;
  j["evaluated"] = r.evaluated;
  j["search"] = {{"population", o.population}, {"generations", o.generations}, {"parents", o.parents}, {"batches", o.batches},
                 {"sigma", o.sigma}, {"max_factor", o.max_factor}, {"seed", o.seed}};
  return j.dump(2) + "\n";
}

}  // namespace hz::study
