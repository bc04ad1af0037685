#!/usr/bin/env python3
"""Draws a zest run's training curves (loss, learning rate, throughput) from RUN_DIR/metrics.jsonl to a PNG.

    python3 scripts/plot_metrics.py runs/hymotion_tiny            # writes runs/hymotion_tiny/metrics.png
    python3 scripts/plot_metrics.py runs/x/metrics.jsonl -o curves.png

metrics.jsonl holds one JSON object per logged step: step, steps (how many steps its loss and rates
average over, since the previous record), loss, lr, loss_scale, grad_norm, skipped, samples_per_s,
step_ms, peak_mem_bytes (missing keys are left out of the plot).
"""
import argparse
import json
import math
import os
import sys


def read_metrics(path):
    with open(path) as f:
        lines = [(number, line) for number, line in enumerate(f, 1) if line.strip()]
    rows = []
    for number, line in lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            # A run killed mid-write leaves a partial last line; anything else is a real error.
            if number == lines[-1][0]:
                print(f"plot_metrics: ignoring the partial last line of {path}", file=sys.stderr)
                break
            sys.exit(f"plot_metrics: {path}:{number}: not JSON ({e})")
    if not rows:
        sys.exit(f"plot_metrics: {path} has no metrics yet")
    return rows


def series(rows, key):
    """(steps, values) of the rows that have `key` with a finite number."""
    points = [(r["step"], r[key]) for r in rows
              if "step" in r and isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [p[0] for p in points], [p[1] for p in points]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run directory (train.run_dir) or a metrics.jsonl file")
    parser.add_argument("-o", "--out", help="output PNG (default: metrics.png beside metrics.jsonl)")
    args = parser.parse_args()

    path = os.path.join(args.run, "metrics.jsonl") if os.path.isdir(args.run) else args.run
    if not os.path.exists(path):
        sys.exit(f"plot_metrics: {path} not found (is this a zest run directory?)")
    out = args.out or os.path.join(os.path.dirname(path) or ".", "metrics.png")
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_metrics: matplotlib is not installed; install it with "
                 "`apt-get install python3-matplotlib` or `pip install matplotlib`")

    rows = read_metrics(path)
    panels = [("loss", "loss", True), ("lr", "learning rate", False),
              ("samples_per_s", "samples / s", False), ("grad_norm", "grad norm", True)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.4 * len(panels)), sharex=True)
    for ax, (key, label, log_scale) in zip(axes, panels):
        steps, values = series(rows, key)
        ax.plot(steps, values, lw=1.2)
        ax.set_ylabel(label)
        if log_scale and values and min(values) > 0:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    skipped = [r["step"] for r in rows if r.get("skipped")]
    for step in skipped:  # non-finite steps: mark them on the loss panel
        axes[0].axvline(step, color="red", alpha=0.3, lw=0.8)
    axes[-1].set_xlabel("step")
    axes[0].set_title(f"{os.path.dirname(os.path.abspath(path))}  ({len(rows)} log steps"
                      + (f", {len(skipped)} skipped" if skipped else "") + ")", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot_metrics: wrote {out}")


if __name__ == "__main__":
    main()
