#!/usr/bin/env bash
# TensorBoard event files end to end (issue 39): a run killed at step 15 (checkpoint at 10) and
# resumed to 20, then `horizon eval`; the tensorboard package's own reader (EventAccumulator, which
# drops what a resumed run trains again) must give every number of metrics.jsonl at its step, the
# resolved recipe as text and horizon eval's losses as eval.json has them; every record's masked
# CRC32C is checked with tensorboard's implementation. Needs a Python with tensorboard
# (HZ_VENV=build/test-venv HZ_VENV_PKGS=tensorboard scripts/tools/venv.sh; scripts/test.sh passes it
# as HZ_TEST_PYTHON): skipped (77) without one, failed when HZ_REQUIRE_PYPI=1.
set -euo pipefail
HZ=$1; SRC=$2; OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=${HZ_TEST_PYTHON:-$(dirname "$HZ")/test-venv/bin/python}
if ! "$PY" -c "import tensorboard" 2> /dev/null; then
  [ "${HZ_REQUIRE_PYPI:-0}" != 1 ] || fail "no Python with tensorboard at $PY (HZ_VENV_PKGS=tensorboard scripts/tools/venv.sh makes one)"
  echo "e2e_tensorboard: skipped: no Python with tensorboard (HZ_VENV_PKGS=tensorboard scripts/tools/venv.sh makes one)"
  exit 77
fi
TINY=(run.out_dir="$OUT" run.name=tb data.cache_dir="$OUT/data" model.n_layers=1 model.d_model=32 data.seq_len=32
      data.batch_size=2 schedule.warmup_steps=1 eval.lengths=[32,64] eval.batches=1 train.log_every=5
      train.steps=20 checkpoint.every=10 eval.every=5)
set +e
HZ_FAULT_RANK=0 HZ_FAULT_STEP=15 HZ_FAULT_SIGNAL=1 "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" > "$OUT/killed.txt" 2>&1
rc=$?
set -e
[ "$rc" -eq 137 ] || fail "the killed run exited $rc: $(tail -3 "$OUT/killed.txt")"
"$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" checkpoint.resume=latest > "$OUT/resumed.txt" 2>&1 \
  || fail "resume: $(tail -3 "$OUT/resumed.txt")"
"$HZ" eval "$OUT/tb" eval.lengths=[32,64] > "$OUT/eval.txt" 2>&1 || fail "eval: $(tail -3 "$OUT/eval.txt")"
[ "$(ls "$OUT/tb"/events.out.tfevents.* | wc -l)" -eq 3 ] || fail "expected 3 event files (run, resume, eval): $(ls "$OUT/tb")"
"$PY" - "$OUT/tb" <<'PY'
import glob, json, math, struct, sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

run = sys.argv[1]
# every record framed with its masked CRC32C
for path in glob.glob(run + "/events.out.tfevents.*"):
    b = open(path, "rb").read()
    at = n_rec = 0
    while at < len(b):
        (n,) = struct.unpack("<Q", b[at:at + 8])
        (hc,) = struct.unpack("<I", b[at + 8:at + 12])
        assert hc == masked_crc32c(b[at:at + 8]), (path, n_rec, "header crc")
        data = b[at + 12:at + 12 + n]
        (dc,) = struct.unpack("<I", b[at + 12 + n:at + 16 + n])
        assert dc == masked_crc32c(data), (path, n_rec, "data crc")
        at += 16 + n
        n_rec += 1
    assert at == len(b) and n_rec > 1, (path, at, len(b), n_rec)

acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])

# metrics.jsonl, flattened as Horizon tags it: "loss", "eval/64/loss", ...
want = {}
def flat(prefix, obj, step):
    for k, v in obj.items():
        if k == "step" and not prefix:
            continue
        tag = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            flat(tag, v, step)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            want.setdefault(tag, {})[step] = float(v)
for line in open(run + "/metrics.jsonl"):
    rec = json.loads(line)
    flat("", rec, rec["step"])
assert want, "metrics.jsonl is empty"
for tag, by_step in want.items():
    assert tag in tags, (tag, sorted(tags))
    got = {}
    for e in acc.Scalars(tag):
        assert e.step not in got, ("a step twice after the resume", tag, e.step)
        got[e.step] = e.value
    assert sorted(got) == sorted(by_step), (tag, sorted(got), sorted(by_step))
    for s, v in by_step.items():
        assert math.isclose(got[s], v, rel_tol=1e-6, abs_tol=1e-30) or got[s] == struct.unpack("<f", struct.pack("<f", v))[0], (tag, s, got[s], v)
assert sorted(want["loss"]) == [5, 10, 15, 20], sorted(want["loss"])

# the resolved recipe as text, at step 0 and at the resume
texts = acc.Tensors("recipe")
assert texts and b"resolved Horizon recipe" in texts[0].tensor_proto.string_val[0], texts

# horizon eval's numbers at the checkpoint's step, as eval.json has them
ev = json.load(open(run + "/eval.json"))
for l in ev["lengths"]:
    s = acc.Scalars(f"horizon_eval/{l['length']}/loss")
    assert len(s) == 1 and s[0].step == 20, s
    assert abs(s[0].value - l["loss"]) <= 1e-5 * max(1.0, abs(l["loss"])), (s[0].value, l["loss"])
print(f"e2e tensorboard: {len(want)} tags, {sum(len(v) for v in want.values())} values equal to metrics.jsonl "
      f"across a kill and resume; horizon eval at step 20; every record's CRC checks")
PY
