// Horizon: everything `horizon eval` measures on a loaded run, written into its run directory:
// loss / perplexity vs length, NLL by position and the fits (eval.csv, eval.json,
// nll_by_position.csv, swan_fit.csv), the teacher-forced passkey grid (passkey.csv), the needle
// grid (needles.csv, needles.json), its retrieval heads (retrieval_heads.csv) and the position probe (probes.csv), each when the recipe's
// eval section asks for it. Used by `horizon eval` and by every sweep point.
#pragma once
#include <string>

#include "distributed/communicator.h"
#include "eval/retrieval.h"
#include "study/load_run.h"

namespace hz::study {

// Returns the printable tables. Synthetic-data runs have no held-out text: they need
// eval.passkey_examples or eval.needle_tasks.
// With a communicator of several ranks (mpirun -np N horizon eval), the loss vs length and the
// NLL by position score each sequence split over the N ranks (context parallelism, so lengths one
// rank cannot hold are measured); rank 0 alone runs the passkey grid, the needles and the probe,
// writes the files and gets the tables; the other ranks get "".
// With eval.retrieval_heads, retrieval_heads.csv holds this checkpoint's heads (at run.step); given
// `retrieval`, this checkpoint's heads are appended to it and the file holds them all (horizon eval
// --all-checkpoints: one file over every kept checkpoint's step).
std::string evaluate_run(LoadedRun& run, bool verbose, dist::Communicator* comm = nullptr,
                         std::vector<eval::RetrievalHead>* retrieval = nullptr);

}  // namespace hz::study
