// Horizon: which parameters Muon updates (docs/methods.md, "Optimizers"). Muon is for the hidden 2-D
// weight matrices; the token embedding ("embed." prefix), the output head ("head." prefix),
// norm gains, biases and scalars go to AdamW.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace hz::optim {

struct Partition {
  std::vector<std::pair<std::string, ag::Variable*>> hidden_matrices;  // for Muon
  std::vector<std::pair<std::string, ag::Variable*>> rest;             // for AdamW
};

// Splits `named` (e.g. Module::named_parameters()) keeping the input order within each part.
// Hidden matrices (is_hidden_matrix): 2-D parameters whose name starts with neither "embed." nor
// "head.".
bool is_hidden_matrix(const std::string& name, const ag::Variable& var);
Partition partition_for_muon(const std::vector<std::pair<std::string, ag::Variable*>>& named);

}  // namespace hz::optim
