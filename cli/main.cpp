// Horizon: the command-line entry point. Subcommands arrive with later issues (train, eval,
// data, bench); `info` reports the build. Library errors become exit codes here and only here.
#include <fmt/core.h>

#include <cstring>
#include <string>
#include <vector>

#include "cli/bench.h"
#include "core/cuda/backend.h"
#include "core/cpu/kernels.h"
#include "core/error.h"

namespace {

void usage() {
  fmt::print(
      "horizon — long-context position-encoding research framework\n\n"
      "usage: horizon <command> [args]\n\n"
      "commands:\n"
      "  info        build configuration: backends, threads, CUDA devices\n"
      "  bench       benchmarks (bench attention); see horizon bench --help\n"
      "  --help      this text\n");
}

int cmd_info() {
  fmt::print("horizon {}\n", HZ_VERSION);
  fmt::print("  cpu threads (OpenMP): {}\n", hz::cpu::num_threads());
#ifdef HZ_HAVE_OPENBLAS_CLI
  fmt::print("  cpu gemm: OpenBLAS\n");
#endif
  fmt::print("  cuda: {}{}\n", hz::cuda::compiled() ? "compiled" : "not compiled",
             hz::cuda::compiled() ? fmt::format(", {} device(s) visible", hz::cuda::device_count())
                                  : std::string());
#ifdef HZ_HAVE_MPI
  fmt::print("  mpi: compiled\n");
#else
  fmt::print("  mpi: not compiled\n");
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
      usage();
      return argc < 2 ? 2 : 0;
    }
    const std::string cmd = argv[1];
    if (cmd == "info") return cmd_info();
    if (cmd == "bench") return hz::cli::bench_main(std::vector<std::string>(argv + 1, argv + argc));
    fmt::print(stderr, "horizon: unknown command '{}'; see horizon --help\n", cmd);
    return 2;
  } catch (const hz::Error& e) {
    fmt::print(stderr, "horizon: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "horizon: internal error: {}\n", e.what());
    return 3;
  }
}
