#!/usr/bin/python3
"""Plots `horizon eval` outputs of one or more runs into one PNG:
left, loss vs evaluation length (log2 x axis, the training length marked); right, mean NLL by
token position at the longest length (smoothed over 32 positions).
    /usr/bin/python3 scripts/tools/plot_eval.py runs/quickstart runs/pretrain_scope -o extrapolation.png
Needs python3-matplotlib (apt-get install python3-matplotlib)."""
import argparse, csv, json, os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("-o", "--out", default="extrapolation.png")
    ap.add_argument("--smooth", type=int, default=32)
    a = ap.parse_args()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    train_len = None
    for run in a.runs:
        name = os.path.basename(os.path.normpath(run))
        with open(os.path.join(run, "eval.json")) as f:
            ev = json.load(f)
        train_len = ev["train_length"]
        L = [r["length"] for r in ev["lengths"]]
        ax1.plot(L, [r["loss"] for r in ev["lengths"]], marker="o", label=name)
        pos_file = os.path.join(run, "nll_by_position.csv")
        if os.path.exists(pos_file):
            with open(pos_file) as f:
                nll = [float(r["nll"]) for r in csv.DictReader(f)]
            k = max(1, a.smooth)
            sm = [sum(nll[max(0, i - k + 1): i + 1]) / len(nll[max(0, i - k + 1): i + 1]) for i in range(len(nll))]
            ax2.plot(range(len(sm)), sm, label=name)
    for ax in (ax1, ax2):
        if train_len:
            ax.axvline(train_len, color="gray", ls="--", lw=1)
        ax.legend()
        ax.grid(alpha=0.3)
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("evaluation length (tokens)")
    ax1.set_ylabel("held-out loss (nats/token)")
    ax1.set_title("loss vs length (dashed: training length)")
    ax2.set_xlabel("token position")
    ax2.set_ylabel(f"mean NLL (moving average of {a.smooth})")
    ax2.set_title("NLL by position at the longest length")
    fig.tight_layout()
    tmp = a.out + ".tmp.png"  # written whole, then renamed: an interrupted run leaves the old plot
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, a.out)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
