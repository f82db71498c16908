#include "optim/partition.h"

#include "core/error.h"

namespace hz::optim {

namespace {
bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}
}  // namespace

bool is_hidden_matrix(const std::string& name, const ag::Variable& var) {
  return var.dim() == 2 && !starts_with(name, "embed.") && !starts_with(name, "head.");
}

Partition partition_for_muon(const std::vector<std::pair<std::string, ag::Variable*>>& named) {
  Partition p;
  for (const auto& [name, var] : named) {
    HZ_CHECK(var != nullptr && var->defined(), ValueError, "partition_for_muon: parameter '", name,
             "' is null or undefined");
    (is_hidden_matrix(name, *var) ? p.hidden_matrices : p.rest).emplace_back(name, var);
  }
  return p;
}

}  // namespace hz::optim
