// Shared by the fused-attention tests: a computation run twice on fresh leaf copies of the same
// inputs, once through the fused op and once through its slow float64 twin (reference_attention),
// must agree in its output and, under one random upstream gradient, in every input's gradient.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "autograd/variable.h"
#include "core/rng.h"

namespace hzt {

using TwinRun = std::function<hz::ag::Variable(const std::vector<hz::ag::Variable>&, bool fused)>;

inline void expect_fused_matches_twin(const TwinRun& run, const std::vector<hz::Tensor>& in, double out_tol,
                                      double grad_tol) {
  std::vector<hz::ag::Variable> xf, xr;
  for (const auto& t : in) {
    xf.emplace_back(t.clone(), true);
    xr.emplace_back(t.clone(), true);
  }
  hz::ag::Variable of = run(xf, true), orf = run(xr, false);
  const std::vector<double> a = of.value().to_vector(), b = orf.value().to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], out_tol) << "output element " << i;
  const hz::Tensor gout = hz::Generator(5).normal(of.shape(), 0, 1, hz::DType::F64);  // the same through both
  of.backward(gout);
  orf.backward(gout);
  for (size_t k = 0; k < xf.size(); ++k) {
    const std::vector<double> ga = xf[k].grad().to_vector(), gb = xr[k].grad().to_vector();
    for (size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(ga[i], gb[i], grad_tol) << "grad of input " << k << " element " << i;
  }
}

}  // namespace hzt
