// Horizon: `horizon convert ...` (Hugging Face checkpoints in and out) and `horizon score ...`.
#pragma once
#include <string>
#include <vector>

namespace hz::cli {
int convert_main(const std::vector<std::string>& args);
int score_main(const std::vector<std::string>& args);
}  // namespace hz::cli
