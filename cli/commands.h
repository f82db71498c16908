// Horizon: subcommands that live in their own files (cli/<name>.cpp). Each takes the full
// argument list (args[0] is the subcommand) and returns the process exit code; library errors
// propagate as exceptions to main(), which maps them to exit codes.
#pragma once
#include <string>
#include <vector>

namespace hz::cli {
int generate_main(const std::vector<std::string>& args);        // horizon generate
int sweep_main(const std::vector<std::string>& args);           // horizon sweep
int report_main(const std::vector<std::string>& args);          // horizon report
int simulate_main(const std::vector<std::string>& args);        // horizon simulate
int info_main(const std::vector<std::string>& args);            // horizon info
int longrope_main(const std::vector<std::string>& args);        // horizon longrope-search
}  // namespace hz::cli
