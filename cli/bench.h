// Horizon: `horizon bench ...` subcommands.
#pragma once
#include <string>
#include <vector>

namespace hz::cli {
int bench_main(const std::vector<std::string>& args);
}
