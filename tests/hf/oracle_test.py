"""HorizonForCausalLM's masks and logit coefficients (hf/remote/modeling_horizon.py) against attention's
float64 oracle: the committed case table tests/fixtures/attention_oracle.json, written by
tests/attention/oracle_test.cpp from attention/reference.h's reference_visibility (the C++ side holds
tiling.h and the fused op to the same table).

Run: python tests/hf/oracle_test.py   (exit 0 when every check passes, 1 otherwise; tests/e2e_hf_export.sh
remote runs it beside remote_code_test.py)

For every case the model can express, in float64: the call's context from HorizonModel._context (positions,
left pads, packed documents from restarting position_ids, the cached keys before the queries), then per
head the model's own helpers: mask_parts + head_visible equal the table's visible keys, row_factor its r_i,
distance_terms + head_logit_terms its sums of r_i a_t and m_t - slope_h |t| over the visible keys (1e-12
relative); layer_windows gives the case's windows (SCOPE's scopes) and alibi_slopes its slopes.
The model cannot express some of Horizon's calls, left out by name: key limits other than left pads
(key_end before the last key), queries that are not the last keys, min_distance, drawn token positions
(transformers' position_ids that jump start a new document), documents without position reset, packed
documents after cached keys, and DroPE's per-document temperature for documents cut by the call.
"""
import importlib
import json
import math
import os
import sys
import time
import types
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REMOTE = os.path.normpath(os.path.join(HERE, "..", "..", "hf", "remote"))
TABLE = os.path.normpath(os.path.join(HERE, "..", "fixtures", "attention_oracle.json"))
REL = 1e-12


def load_remote():
    """modeling_horizon as transformers loads it: a package holding the two files (relative imports)."""
    pkg = types.ModuleType("horizon_remote")
    pkg.__path__ = [REMOTE]
    sys.modules["horizon_remote"] = pkg
    return importlib.import_module("horizon_remote.modeling_horizon")


def close(got, want):
    return got == want or abs(got - want) <= REL * max(abs(got), abs(want))


def resolved(c):
    off = c["Tk"] - c["Tq"] if c["q_offset"] < 0 else c["q_offset"]
    ke = c["Tk"] if c["key_end"] < 0 else min(c["key_end"], c["Tk"])
    return off, ke


def doc_starts(c):
    """Per sequence, the first absolute position of each position's document (None without documents)."""
    d = c["documents"]
    if d is None:
        return None
    T, cu = d["T"], d["cu_seqlens"]
    first = [[0] * T for _ in range(c["B"])]
    for a, b in zip(cu, cu[1:]):
        for g in range(a, b):
            first[g // T][g % T] = a % T
    return first


def unexpressible(c):
    """Why HorizonForCausalLM cannot make this call (None when it can)."""
    off, ke = resolved(c)
    d = c["documents"]
    if c["min_distance"] > 0:
        return "min_distance"
    if ke < c["Tk"]:
        return "key_end before the last key"
    if off + c["Tq"] != c["Tk"]:
        return "queries not the last keys"
    if c["positions"] is not None:
        return "drawn token positions"
    if d is not None:
        if not d["position_reset"]:
            return "documents without position reset"
        if c["key_begin"] > 0:
            return "documents with key_begin"
        first = doc_starts(c)
        kp = c["key_position"]
        packed = any(len({first[b][kp + j] for j in range(c["Tk"])}) > 1 for b in range(c["B"]))
        if packed and c["Tq"] < c["Tk"]:
            return "packed documents after cached keys"
        if c["logit"] == "temperature" and c["temp_c"] != 0.0 and c["train_len"] > 0 and (kp > 0 or d["T"] > c["Tk"]):
            return "DroPE's per-document temperature for documents the call cuts"
    return None


def kind_of(c, base):
    """The layer kind (configuration_horizon.py's fields) of a case, and its train_length."""
    k = dict(base)
    k.update(chunk=c["chunk"], sink_tokens=c["sink_tokens"], prefix=c["prefix"], logit=c["logit"], tau=c["tau"],
             swan_a=c["swan_a"], logn_position=c["logn_position"], qtemp_alpha=c["qtemp_alpha"],
             qtemp_beta=c["qtemp_beta"], beta=c["beta"], temp_c=0.0)
    if c["mask"] == "causal":
        k.update(mask="causal")
    elif c["mask"] == "window":
        k.update(mask="window", window=c["window"][0])
    elif c["mask"] == "scope":
        k.update(mask="scope", scopes=[], scope_gamma=0.0, scope_min=1, scope_max=0, freeze_scopes=False)
    else:  # any per-head mix: SCOPE's explicit scopes (0: unbounded)
        k.update(mask="scope", scopes=list(c["window"]))
    train_length = 0
    if c["logit"] == "temperature" and c["documents"] is not None and c["temp_c"] != 0.0 and c["train_len"] > 0:
        k.update(temp_c=c["temp_c"])  # Horizon's beta per document; otherwise the call's beta
        train_length = c["train_len"]
    return k, train_length


BASE_KIND = {"mask": "causal", "window": 0, "scopes": [], "scope_gamma": 0.0, "scope_min": 1, "scope_max": 0,
             "freeze_scopes": False, "chunk": 0, "sink_tokens": 0, "prefix": 0, "logit": "identity", "tau": 10.0,
             "swan_a": 362.0, "beta": 1.0, "temp_c": 0.0, "logn_position": False, "qtemp_alpha": 0.0,
             "qtemp_beta": 8192.0}


def check_case(mh, c, fail):
    B, H, Tq, Tk, kp = c["B"], c["H"], c["Tq"], c["Tk"], c["key_position"]
    first = doc_starts(c)
    # the keys' positions (inside their documents with documents: position_ids restart) and left pads
    pos = torch.tensor([[kp + j - (first[b][kp + j] if first else 0) for j in range(Tk)] for b in range(B)])
    valid = torch.tensor([[j >= c["key_begin"] for j in range(Tk)] for _ in range(B)])
    past = Tk - Tq
    cache = types.SimpleNamespace(positions=pos[:, :past], valid=valid[:, :past]) if past else None
    model = types.SimpleNamespace(config=types.SimpleNamespace(context_length=None))  # all _context reads of it
    ctx = mh.HorizonModel._context(model, B, Tq, "cpu", valid.long(), pos[:, past:], cache)

    kind, train_length = kind_of(c, BASE_KIND)
    T = c.get("scope_T", Tk)
    windows = mh.layer_windows(kind, H, T, 0)
    if windows != c["window"]:
        fail(f"layer_windows gives {windows}, the table {c['window']}")
        return
    slopes = None
    if c["alibi_slope"]:
        slopes = mh.alibi_slopes(H)
        if not all(close(a, b) for a, b in zip(slopes, c["alibi_slope"])):
            fail(f"alibi_slopes gives {slopes}, the table {c['alibi_slope']}")
            return
    parts = mh.mask_parts(kind, ctx)
    tt, a_t, m_t = mh.distance_terms(kind, ctx["t"])
    W = torch.tensor(windows)
    bit = 2 ** torch.arange(Tk)
    q_valid = ctx["q_valid"].tolist()
    for h in range(H):
        vis = mh.head_visible(ctx, parts, W[h].view(1, 1, 1).expand(B, 1, 1))  # (B, Tq, Tk)
        r = mh.row_factor(kind, ctx, vis.sum(-1, keepdim=True), train_length)
        coef, bias = mh.head_logit_terms(r, a_t, m_t, tt, slopes[h] if slopes else None)
        bits = (vis.long() * bit).sum(-1).tolist()  # (B, Tq): bit j = key j, as the table writes them
        factor = r.expand(B, Tq, 1)[..., 0].tolist()
        coef_sum = torch.where(vis, coef.expand(B, Tq, Tk), 0.0).sum(-1).tolist()
        bias_sum = torch.where(vis, bias, 0.0).sum(-1).tolist() if bias is not None else [[0.0] * Tq] * B
        for b in range(B):
            for i in range(Tq):
                row = (b * H + h) * Tq + i
                where = f"case {c['id']} (b {b}, h {h}, row {i})"
                want = int(c["visible"][row], 16)
                if bits[b][i] != want:
                    fail(f"{where}: head_visible sees {bits[b][i]:x}, the table {want:x}")
                    return
                if not q_valid[b][i]:  # a left pad: no query, so no factor to compare
                    continue
                for what, g, w in [("row_factor", factor[b][i], c["factor"][row]),
                                   ("sum of r_i a_t", coef_sum[b][i], c["coef_sum"][row]),
                                   ("sum of m_t - slope_h |t|", bias_sum[b][i], c["bias_sum"][row])]:
                    if not close(g, w):
                        fail(f"{where}: {what} {g!r}, the table {w!r}")
                        return


def main():
    torch.set_default_dtype(torch.float64)
    try:
        with open(TABLE, encoding="utf-8") as f:
            cases = json.load(f)["cases"]
    except (OSError, ValueError, KeyError) as err:
        print(f"{TABLE}: cannot read the oracle table ({err}); regenerate it with "
              "HZ_REGEN_ORACLE=1 build/hz_test_attention --gtest_filter='Oracle.*'")
        return 1
    t0 = time.monotonic()
    mh = load_remote()
    t1 = time.monotonic()
    print(f"remote code under test: {REMOTE}; table: {TABLE}")
    failures, skipped, covered = [], Counter(), Counter()
    for c in cases:
        why = unexpressible(c)
        if why:
            skipped[why] += 1
            continue
        before = len(failures)
        check_case(mh, c, failures.append)
        if len(failures) > before:
            continue
        off, _ = resolved(c)
        d = c["documents"]
        for what, on in [("mask " + c["mask"], True), ("logit " + c["logit"], True), ("chunk", c["chunk"] > 0),
                         ("sink tokens", c["sink_tokens"] > 0), ("prefix", c["prefix"] > 0),
                         ("packed documents", d is not None), ("cached keys (Tq < Tk)", c["Tq"] < c["Tk"]),
                         ("left pads (key_begin)", c["key_begin"] > 0), ("key_position", c["key_position"] > 0),
                         ("ALiBi", bool(c["alibi_slope"])), ("Llama 4's qtemp", c["qtemp_alpha"] != 0.0),
                         ("logn_position", c["logit"] == "logn" and c["logn_position"]),
                         ("temperature per document", c["logit"] == "temperature" and d is not None and c["temp_c"] != 0.0),
                         ("GQA", c["H"] > c["Hkv"]), ("two sequences", c["B"] == 2)]:
            covered[what] += on
    for f in failures:
        print("FAIL", f)
    print(f"import {t1 - t0:.1f} s, checks {time.monotonic() - t1:.1f} s")
    checked = len(cases) - sum(skipped.values())
    print(f"{checked} of {len(cases)} cases checked, {len(failures)} failed; left out (the model cannot express them): "
          + ", ".join(f"{n} {w}" for w, n in sorted(skipped.items())))
    print("checked cases with: " + ", ".join(f"{w} {n}" for w, n in sorted(covered.items())))
    thin = [w for w in ["mask causal", "mask window", "mask scope", "mask heads", "logit identity",
                        "logit scale_invariant", "logit logn", "logit swan_row", "logit temperature", "chunk",
                        "sink tokens", "prefix", "packed documents", "cached keys (Tq < Tk)", "left pads (key_begin)",
                        "key_position", "ALiBi", "Llama 4's qtemp", "logn_position", "temperature per document", "GQA",
                        "two sequences"] if covered[w] < 3]
    if thin:
        print("FAIL too few checked cases with: " + ", ".join(thin))
    if checked < 100:
        print(f"FAIL only {checked} cases checked")
    return 1 if failures or thin or checked < 100 else 0


if __name__ == "__main__":
    sys.exit(main())
