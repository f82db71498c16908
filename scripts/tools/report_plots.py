#!/usr/bin/python3
"""Draws the PNG plots of `horizon report` from its report.json (Debian's python3-matplotlib).
    /usr/bin/python3 scripts/tools/report_plots.py REPORT_DIR/report.json REPORT_DIR
Writes loss_vs_length.png, nll_by_position.png, training_loss.png, needles_<run>.png (a '/' in the run's name as '-'),
probe_r2.png, attention_flops.png and order_awareness.png (a plot without data is skipped)."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def smooth(v, k):
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x
        if i >= k:
            acc -= v[i - k]
        out.append(acc / min(i + 1, k))
    return out


def label_axes(ax, xlabel, ylabel, title, legend_size=8):
    """The finish every line plot shares: labels, title, light grid, legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def save(fig, out, name, tight=True):
    """Writes out/name whole or not at all: matplotlib writes in place, so it goes to a temporary
    name first and is renamed over the old plot (an interrupted report leaves no 0-byte PNG)."""
    if tight:
        fig.tight_layout()
    path = os.path.join(out, name)
    tmp = path + ".tmp.png"
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    plt.close(fig)


def main():
    data = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    runs = data["runs"]
    train_len = sorted({r["train_length"] for r in runs})

    evaluated = [r for r in runs if r.get("lengths")]
    if evaluated:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for r in evaluated:
            L = [x["length"] for x in r["lengths"]]
            a1.plot(L, [x["loss"] for x in r["lengths"]], marker="o", label=r["name"])
            a2.plot(L, [x["last256_loss"] for x in r["lengths"]], marker="o", label=r["name"])
        for ax, title in ((a1, "held-out loss vs length"), (a2, "loss of the last 256 positions vs length")):
            ax.set_xscale("log", base=2)
            for t in train_len:
                ax.axvline(t, color="gray", ls="--", lw=1)
            label_axes(ax, "evaluation length (tokens; dashed: training length)", "nats / token", title)
        save(fig, out, "loss_vs_length.png")

    with_nll = [r for r in runs if r.get("nll_by_position")]
    if with_nll:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for r in with_nll:
            ax.plot(smooth(r["nll_by_position"], 32), label=r["name"])
        for t in train_len:
            ax.axvline(t, color="gray", ls="--", lw=1)
        label_axes(ax, "token position", "mean NLL (moving average of 32)", "NLL by position at the longest evaluated length")
        save(fig, out, "nll_by_position.png")

    with_curve = [r for r in runs if r.get("train_curve")]
    if with_curve:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for r in with_curve:
            ax.plot([p[0] for p in r["train_curve"]], [p[1] for p in r["train_curve"]], label=r["name"])
        label_axes(ax, "step", "training loss", "training loss")
        save(fig, out, "training_loss.png")

    for r in runs:
        cells = r.get("needles") or []
        if not cells:
            continue
        tasks = sorted({c["task"] for c in cells})
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
        for k, (ax, task) in enumerate(zip(axes[0], tasks)):
            cs = [c for c in cells if c["task"] == task]
            Ls = sorted({c["length"] for c in cs})
            Ds = sorted({c["depth"] for c in cs})
            grid = [[float("nan")] * len(Ls) for _ in Ds]
            for c in cs:
                grid[Ds.index(c["depth"])][Ls.index(c["length"])] = c["accuracy"]
            im = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
            ax.set_xticks(range(len(Ls)))
            ax.set_xticklabels([str(x) for x in Ls], rotation=45)
            ax.set_yticks(range(len(Ds)))
            ax.set_yticklabels([f"{d:.2f}" for d in Ds])
            for i in range(len(Ds)):
                for j in range(len(Ls)):
                    if grid[i][j] == grid[i][j]:
                        ax.text(j, i, f"{100 * grid[i][j]:.0f}", ha="center", va="center", fontsize=8)
            ax.set_xlabel("length (tokens)")
            if k == 0:
                ax.set_ylabel("needle depth")
            ax.set_title(task, fontsize=9)
        fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="accuracy")
        fig.suptitle(f"needle accuracy: {r['name']}")
        save(fig, out, f"needles_{r['name'].replace('/', '-')}.png", tight=False)  # a run of a shared name: parent/name

    with_probe = [r for r in runs if r.get("probes")]
    if with_probe:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in with_probe:
            ax.plot([p["layer"] for p in r["probes"]], [p["r2"] for p in r["probes"]], marker="o", label=r["name"])
        label_axes(ax, "layer (0 = embeddings)", "R^2 on held-out positions", "linear probe of absolute position")
        ax.set_ylim(min(0.0, ax.get_ylim()[0]), 1.02)
        save(fig, out, "probe_r2.png")

    with_flops = [r for r in runs if r.get("attention_flops")]
    if with_flops:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in with_flops:
            ax.plot([f[0] for f in r["attention_flops"]], [f[1] / 1e9 for f in r["attention_flops"]], marker="o", label=r["name"])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        label_axes(ax, "sequence length", "attention GFLOP (forward, all layers)", "attention FLOPs per method (exact visible pairs)")
        save(fig, out, "attention_flops.png")

    oa = data.get("order_awareness")
    if oa:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, r in oa["r"].items():
            ax.plot(range(1, len(r) + 1), r, marker="o", label=name)
        label_axes(ax, "layers", "r = distinct values / T", f"order awareness (T = {oa['T']}, H = {oa['heads']})", legend_size=None)
        ax.set_ylim(0, 1.02)
        save(fig, out, "order_awareness.png")


if __name__ == "__main__":
    main()
