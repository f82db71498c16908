// Horizon: `horizon tokenize ...` and `horizon bench tokenizer ...`.
#pragma once
#include <string>
#include <vector>

namespace hz::cli {
int tokenize_main(const std::vector<std::string>& args);        // args[0] == "tokenize"
int bench_tokenizer_main(const std::vector<std::string>& args);  // args[0] == "bench", args[1] == "tokenizer"
}  // namespace hz::cli
