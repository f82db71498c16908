// Horizon: ZeRO stage 1 (see zero.h for the plan and the guarantees).
#include "distributed/zero.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

namespace hz::dist {

namespace {

optim::NamedParams flatten(const optim::OptimizerSpec& s) {
  optim::NamedParams out;
  for (const auto& g : s.groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

Tensor flat(ag::Variable& v) { return v.value().reshape({-1}); }

}  // namespace

// ---- the plan -----------------------------------------------------------------------------------

ZeroPlan::ZeroPlan(const std::vector<optim::OptimizerSpec>& specs, int world) : by_rank_(world) {
  HZ_CHECK(world >= 1, ValueError, "shard_optimizer: world size ", world);
  std::vector<int64_t> muon_load(world, 0);
  for (size_t part = 0; part < specs.size(); ++part) {
    const optim::NamedParams ps = flatten(specs[part]);
    std::vector<int64_t> numel(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) numel[i] = ps[i].second->value().numel();
    total_ += std::accumulate(numel.begin(), numel.end(), int64_t(0));
    if (specs[part].kind == optim::OptimizerSpec::Kind::Muon) {
      // whole matrices, largest first, each to the least-loaded rank (stable: ties keep order)
      std::vector<size_t> order(ps.size());
      std::iota(order.begin(), order.end(), size_t(0));
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numel[a] > numel[b]; });
      std::vector<std::vector<ZeroPiece>> got(world);
      for (size_t i : order) {
        const int r = static_cast<int>(std::min_element(muon_load.begin(), muon_load.end()) - muon_load.begin());
        muon_load[r] += numel[i];
        got[r].push_back({part, i, 0, numel[i]});
      }
      for (int r = 0; r < world; ++r) {  // each rank's pieces in the optimizer's parameter order
        std::sort(got[r].begin(), got[r].end(), [](const ZeroPiece& a, const ZeroPiece& b) { return a.param < b.param; });
        by_rank_[r].insert(by_rank_[r].end(), got[r].begin(), got[r].end());
      }
      continue;
    }
    // AdamW: equal ranges of the concatenated elements
    const int64_t n = std::accumulate(numel.begin(), numel.end(), int64_t(0));
    const int64_t S = (n + world - 1) / world;
    int64_t base = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      for (int r = 0; r < world; ++r) {
        const int64_t lo = std::max(base, r * S), hi = std::min(base + numel[i], (r + 1) * S);
        if (lo < hi) by_rank_[r].push_back({part, i, lo - base, hi - base});
      }
      base += numel[i];
    }
  }
}

int64_t ZeroPlan::share_numel(int rank) const {
  int64_t n = 0;
  for (const auto& p : pieces(rank)) n += p.numel();
  return n;
}

int64_t ZeroPlan::max_share() const {
  int64_t m = 0;
  for (int r = 0; r < world(); ++r) m = std::max(m, share_numel(r));
  return m;
}

// ---- the optimizer ------------------------------------------------------------------------------

ZeroOptimizer::ZeroOptimizer(Communicator& comm, std::vector<optim::OptimizerSpec> specs)
    : Optimizer({}), comm_(comm), specs_(std::move(specs)), plan_(specs_, comm.size()) {
  HZ_CHECK(!specs_.empty(), ValueError, "shard_optimizer: nothing to optimise");
  name_ = specs_.size() == 1 ? specs_[0].name() : "composite";
  const ag::Variable* first = nullptr;
  for (const auto& s : specs_) {
    params_.push_back(flatten(s));
    for (const auto& [n, v] : params_.back()) {
      HZ_CHECK(v != nullptr && v->defined(), ValueError, "shard_optimizer: parameter '", n, "' is undefined");
      HZ_CHECK(v->value().is_contiguous(), ValueError, "shard_optimizer: parameter '", n,
               "' is not contiguous; its flat pieces would not be views of it");
      if (!first) first = v;
      HZ_CHECK(v->value().dtype() == first->value().dtype() && v->value().device() == first->value().device(), ValueError,
               "shard_optimizer: parameter '", n, "' is ", dtype_name(v->value().dtype()), " on ",
               v->value().device().str(), " but the first is ", dtype_name(first->value().dtype()), " on ",
               first->value().device().str(), "; the exchange needs one dtype and device");
    }
  }
  // this rank's optimizer: the same specs over its pieces, AdamW pieces as views of the parameters
  std::vector<optim::OptimizerSpec> mine = specs_;
  for (auto& s : mine)
    for (auto& g : s.groups) g.params.clear();
  for (const ZeroPiece& p : plan_.pieces(comm_.rank())) {
    const optim::OptimizerSpec& s = specs_[p.part];
    ag::Variable* v = params_[p.part][p.param].second;
    ag::Variable* target = v;
    if (s.kind == optim::OptimizerSpec::Kind::AdamW) {
      proxies_.push_back(std::make_unique<ag::Variable>(flat(*v).narrow(0, p.lo, p.numel())));
      target = proxies_.back().get();
    } else {
      proxies_.push_back(nullptr);  // Muon: the whole matrix itself
    }
    // the group the parameter belongs to
    size_t gi = 0, seen = 0;
    while (seen + s.groups[gi].params.size() <= p.param) seen += s.groups[gi++].params.size();
    mine[p.part].groups[gi].params.emplace_back(param_name(p), target);
  }
  local_ = optim::build(mine);
}

ZeroOptimizer::~ZeroOptimizer() = default;

std::string ZeroOptimizer::full_key(const ZeroPiece& p, const std::string& buffer) const {
  return specs_[p.part].name() + "/" + param_name(p) + "/" + buffer;
}

int64_t ZeroOptimizer::state_numel() const { return share_state_numel(comm_.rank()); }

int64_t ZeroOptimizer::state_bytes(int rank) const {
  int64_t n = 0;
  for (int q = 0; q < comm_.size(); ++q)
    if (rank < 0 || q == rank) n += share_state_numel(q);
  return n * static_cast<int64_t>(dtype_size(params_[0][0].second->value().dtype()));
}

int64_t ZeroOptimizer::share_state_numel(int rank) const {
  int64_t n = 0;
  for (const ZeroPiece& p : plan_.pieces(rank)) n += p.numel() * static_cast<int64_t>(specs_[p.part].buffers().size());
  return n;
}

void ZeroOptimizer::step(double lr_mult, double grad_scale) {
  const std::vector<ZeroPiece>& mine = plan_.pieces(comm_.rank());
  // the AdamW pieces' gradients: views of the averaged gradients
  for (size_t k = 0; k < mine.size(); ++k) {
    if (!proxies_[k]) continue;
    const Tensor& g = param(mine[k]).grad();
    proxies_[k]->grad() = g.defined() ? g.contiguous().reshape({-1}).narrow(0, mine[k].lo, mine[k].numel()) : Tensor();
  }
  local_->step(lr_mult, grad_scale);
  ++step_;
  for (auto& px : proxies_)
    if (px) px->grad() = Tensor();
  // every rank's pieces to every rank: one all-gather, each share padded to the largest
  const auto t0 = std::chrono::steady_clock::now();
  const int world = comm_.size();
  const int64_t S = plan_.max_share();
  if (world > 1 && S > 0) {
    const Tensor& any = params_[0][0].second->value();
    Tensor send = Tensor::zeros({S}, any.dtype(), any.device());
    int64_t off = 0;
    for (const ZeroPiece& p : mine) {
      Tensor dst = send.narrow(0, off, p.numel());
      dst.copy_(flat(param(p)).narrow(0, p.lo, p.numel()));
      off += p.numel();
    }
    Tensor recv = Tensor::empty({world * S}, any.dtype(), any.device());
    comm_.all_gather_into(send, recv);
    for (int q = 0; q < world; ++q) {
      if (q == comm_.rank()) continue;
      off = q * S;
      for (const ZeroPiece& p : plan_.pieces(q)) {
        Tensor dst = flat(param(p)).narrow(0, p.lo, p.numel());
        dst.copy_(recv.narrow(0, off, p.numel()));
        off += p.numel();
      }
    }
  }
  comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ZeroOptimizer::gather_state(int root, std::map<std::string, Tensor>& out) const {
  std::map<std::string, Tensor> local;
  local_->state_dict(local);
  const bool keep = root < 0 || comm_.rank() == root;
  if (keep) {
    for (const auto& [k, v] : local)  // the step counters: the same on every rank
      if (k.size() >= 5 && k.compare(k.size() - 5, 5, "/step") == 0) out[k] = v;
    for (size_t part = 0; part < specs_.size(); ++part)
      for (size_t i = 0; i < params_[part].size(); ++i) {
        const Tensor& v = params_[part][i].second->value();
        for (const auto& b : specs_[part].buffers())
          out[specs_[part].name() + "/" + params_[part][i].first + "/" + b] = Tensor::zeros(v.shape(), v.dtype(), v.device());
      }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor& any = params_[0][0].second->value();
  for (int q = 0; q < comm_.size(); ++q) {
    const int64_t n = share_state_numel(q);
    if (n == 0) continue;
    Tensor buf = Tensor::empty({n}, any.dtype(), any.device());
    int64_t off = 0;
    if (q == comm_.rank())
      for (const ZeroPiece& p : plan_.pieces(q))
        for (const auto& b : specs_[p.part].buffers()) {
          Tensor dst = buf.narrow(0, off, p.numel());
          dst.copy_(local.at(full_key(p, b)).reshape({-1}));
          off += p.numel();
        }
    comm_.broadcast(buf, q);
    if (!keep) continue;
    off = 0;
    for (const ZeroPiece& p : plan_.pieces(q))
      for (const auto& b : specs_[p.part].buffers()) {
        Tensor dst = out.at(full_key(p, b)).reshape({-1}).narrow(0, p.lo, p.numel());
        dst.copy_(buf.narrow(0, off, p.numel()));
        off += p.numel();
      }
  }
  comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ZeroOptimizer::state_dict(std::map<std::string, Tensor>& out) const { gather_state(-1, out); }

void ZeroOptimizer::state_dict_on(int root, std::map<std::string, Tensor>& out) const {
  HZ_CHECK(root >= 0 && root < comm_.size(), ValueError, "shard_optimizer: root ", root, " outside 0 .. ", comm_.size() - 1);
  gather_state(root, out);
}

void ZeroOptimizer::check_state_dict(const std::map<std::string, Tensor>& in) const {
  // the replicated optimizer's keys, whole shapes
  std::set<std::string> expected{name_ + "/step"};
  for (size_t part = 0; part < specs_.size(); ++part) {
    const std::string pn = specs_[part].name();
    expected.insert(pn + "/step");
    for (const auto& [n, v] : params_[part])
      for (const auto& b : specs_[part].buffers()) {
        const std::string k = pn + "/" + n + "/" + b;
        expected.insert(k);
        auto it = in.find(k);
        HZ_CHECK(it != in.end(), ValueError, pn, ": optimizer state key '", k,
                 "' is missing; the state was saved for a different model or optimizer");
        HZ_CHECK(it->second.defined() && it->second.shape() == v->value().shape(), ValueError, pn,
                 ": optimizer state key '", k, "' has shape ",
                 it->second.defined() ? shape_str(it->second.shape()) : std::string("(undefined)"), " but parameter '", n,
                 "' needs ", shape_str(v->value().shape()), "; the state was saved for a different model");
      }
  }
  std::set<std::string> prefixes{name_ + "/"};
  for (const auto& s : specs_) prefixes.insert(s.name() + "/");
  for (const auto& pre : prefixes)
    for (auto jt = in.lower_bound(pre); jt != in.end() && jt->first.compare(0, pre.size(), pre) == 0; ++jt)
      HZ_CHECK(expected.count(jt->first) > 0, ValueError, pre.substr(0, pre.size() - 1), ": optimizer state key '",
               jt->first, "' names no parameter of this optimizer; the state was saved for a different model "
               "or parameter partition");
}

void ZeroOptimizer::load_state_dict(const std::map<std::string, Tensor>& in) {
  check_state_dict(in);
  // this rank's share under the local optimizer's keys (the same names, pieces flat)
  std::map<std::string, Tensor> local;
  for (const auto& [k, v] : in)
    if (k.size() >= 5 && k.compare(k.size() - 5, 5, "/step") == 0) local[k] = v;
  for (const ZeroPiece& p : plan_.pieces(comm_.rank()))
    for (const auto& b : specs_[p.part].buffers()) {
      const Tensor& whole = in.at(full_key(p, b));
      local[full_key(p, b)] = specs_[p.part].kind == optim::OptimizerSpec::Kind::Muon
                                  ? whole
                                  : whole.contiguous().reshape({-1}).narrow(0, p.lo, p.numel()).contiguous();
    }
  local_->load_state_dict(local);
  step_ = static_cast<int64_t>(in.at(name_ + "/step").item());
}

void ZeroOptimizer::zero_grad() {
  for (auto& ps : params_)
    for (auto& [n, v] : ps) v->zero_grad();
}

}  // namespace hz::dist
