// Horizon: the model card of a Hugging Face export (README.md, what the Hub shows and indexes).
//
// YAML front matter as the Hub reads it (license, library_name: transformers, pipeline_tag:
// text-generation, tags), then the run as its own files record it: how to load the folder, the
// model's dimensions and each layer kind in words (attn::AttentionSpec::describe()), the training
// data and the tokens seen (the exported checkpoint's counter; the last training loss of
// metrics.jsonl), the recipe (the run's config.yaml, embedded verbatim) and the evaluation (eval.json's
// loss, perplexity and last-256 loss per length; needle accuracy per task and length with the
// effective length, read and computed as `horizon report` does: study/report.h). Every number
// comes from the run's files; a run that has not been evaluated says so. A run file that is not what
// Horizon writes is refused (ValueError naming it) before the export writes anything.
#pragma once
#include <string>

#include "study/load_run.h"

namespace hz::study {

struct CardOptions {
  // The Hub's license identifier ("apache-2.0", "mit", "llama3.1", ...); "" writes `license: other`
  // and a line telling the publisher to set it.
  std::string license;
};

// Refuses (ValueError) what is not a Hub license identifier: lower-case letters, digits, '.', '-'.
void check_license_id(const std::string& id);

// The README.md of the export of `run` as `architecture` (hf::ExportReport::architecture).
std::string model_card(const LoadedRun& run, const std::string& architecture, const CardOptions& o = {});

}  // namespace hz::study
