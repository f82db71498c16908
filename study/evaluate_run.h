// Horizon: everything `horizon eval` measures on a loaded run, written into its run directory:
// loss / perplexity vs length, NLL by position and the fits (eval.csv, eval.json,
// nll_by_position.csv, swan_fit.csv), the teacher-forced passkey grid (passkey.csv), the needle
// grid (needles.csv, needles.json) and the position probe (probes.csv), each when the recipe's
// eval section asks for it. Used by `horizon eval` and by every sweep point.
#pragma once
#include <string>

#include "study/load_run.h"

namespace hz::study {

// Returns the printable tables. Synthetic-data runs have no held-out text: they need
// eval.passkey_examples or eval.needle_tasks.
std::string evaluate_run(LoadedRun& run, bool verbose);

}  // namespace hz::study
