"""Horizon's needle grid as lm-eval-harness tasks (RULER's NIAH format), beside the YAML and JSON-lines
files `horizon eval RUN --export-lm-eval DIR` writes (docs/needles.md). Each row is one example of the
grid `horizon eval` answers (the same seeds, depths, lengths and tokenizer):
  index, task, length (the grid's length in tokens), depth, sample, input (the prompt, ending with the
  answer prefix), outputs (the values the continuation must contain), answer (the canonical answer),
  input_tokens, max_gen_toks (horizon eval's budget: the answer's tokens + 4)
Scoring is horizon eval's (data/needles.h, RULER's string_match_all): the share of `outputs` found in
the greedy continuation, ASCII case-insensitively; an example is correct (acc 1) when all are found.
"""
import json
import os

import datasets
from lm_eval.api.task import ConfigurableTask

HERE = os.path.dirname(os.path.abspath(__file__))


def dataset(data_file=None, **kwargs):
    """The task's rows from its JSON-lines file beside this one (so the folder may move)."""
    with open(os.path.join(HERE, data_file), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {"test": datasets.Dataset.from_list(rows)}


class NeedleTask(ConfigurableTask):
    """generate_until with each example's own budget: horizon eval decodes at most max_gen_toks new
    tokens, a number of the example (its answer's length) that a task's generation_kwargs cannot
    state. The rest is the YAML's: greedy, stopping only at the tokenizer's EOS."""

    def __init__(self, config=None, **kwargs):
        # the YAML's `class` key names this class; the task's own fields are the rest
        super().__init__(config={k: v for k, v in (config or {}).items() if k != "class"}, **kwargs)

    def construct_requests(self, doc, ctx, **kwargs):
        requests = super().construct_requests(doc, ctx, **kwargs)
        for r in requests if isinstance(requests, list) else [requests]:
            r.arguments[1]["max_gen_toks"] = int(doc["max_gen_toks"])
        return requests


_UPPER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _lower(s):
    # std::tolower in the C locale: ASCII letters only (Python's lower() would also fold e.g. the
    # Kelvin sign into "k")
    return s.translate(_UPPER)


def needle_score(text, answers):
    """data::needle_score: the share of answers contained in text; an empty answer is never found."""
    if not answers:
        return 1.0
    t = _lower(text)
    return sum(1 for a in answers if a and _lower(a) in t) / len(answers)


def process_results(doc, results):
    score = needle_score(results[0], doc["outputs"])
    # acc: horizon eval's accuracy (every value found); score: the share found. Each sample logged
    # (--log_samples) carries its row's length and depth for per-cell tables.
    return {"acc": float(score == 1.0), "score": score}
