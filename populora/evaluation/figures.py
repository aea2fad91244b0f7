"""Figures of a sweep, as PNG files (the report) and as matplotlib figures (the UI's Compare page):

- ``intervals``: per benchmark (and the averages, ours and AZR's), a dot-and-interval plot of every
  configuration's population mean and the baseline, 95% intervals as bars;
- ``arms_race``: per configuration, a training curve (student solve rate by default) of each seed, thin, with
  their mean over seeds, thick.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from populora.platform.store import runlayout
from populora.platform.store import sweep as S

ARMS_RACE_METRIC = runlayout.SOLVE_RATE
RATE_METRICS = (runlayout.SOLVE_RATE, runlayout.VALIDITY_RATE)  # shares in 0-1: drawn in %


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files, no display
    import matplotlib.pyplot as plt

    return plt


def intervals(report: dict, arm: str = "population mean"):
    """One panel per benchmark / average: each configuration's mean (dot) and 95% interval (bar), in %."""
    plt = _plt()
    rows = report["configs"]
    groups = list(dict.fromkeys(g for r in rows for g in r[arm]))
    averages = ("overall", "code avg", "math avg", "total (AZR)", "math avg (AZR)")
    groups = [g for g in averages if g in groups] + [g for g in groups if g not in averages]
    cols = min(4, max(1, len(groups)))
    fig, axes = plt.subplots(-(-len(groups) // cols), cols, figsize=(4 * cols, 0.5 + 0.45 * len(rows) * -(-len(groups) // cols) + 1),
                             squeeze=False, sharey=True)
    for i, (ax, g) in enumerate(zip(axes.flat, groups)):
        for y, r in enumerate(rows):
            e = r[arm].get(g)
            if e is None:
                continue
            lo, hi = 100 * e["ci95"][0], 100 * e["ci95"][1]
            color = "tab:gray" if r["label"] == "baseline" else "tab:blue"
            ax.errorbar([100 * e["mean"]], [y], xerr=[[100 * e["mean"] - lo], [hi - 100 * e["mean"]]], fmt="o",
                        color=color, capsize=3)
        ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=7)
        ax.tick_params(labelleft=i % cols == 0)  # configuration names once per row of panels
        ax.set_title(g, fontsize=9)
        ax.set_xlabel("score (%)", fontsize=8)
    axes.flat[0].invert_yaxis()  # shared y: inverting once flips every panel
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    fig.suptitle(f"{arm}: mean and 95% interval per configuration", fontsize=10)
    fig.tight_layout()
    return fig


def arms_race(curves: dict[str, dict[int, list[tuple[int, float]]]], metric: str = ARMS_RACE_METRIC):
    """``curves``: {config label: {seed: [(step, value), ...]}} -> one panel per configuration."""
    plt = _plt()
    labels = list(curves) or ["(no runs)"]
    fig, axes = plt.subplots(1, len(labels), figsize=(4 * len(labels), 3), squeeze=False)
    for ax, lab in zip(axes.flat, labels):
        by_seed = curves.get(lab, {})
        for seed, points in sorted(by_seed.items()):
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, lw=1, alpha=0.5, label=f"seed {seed}")
        mean = mean_curve(by_seed)
        if mean:
            ax.plot(*zip(*mean), lw=2.5, color="black", label="mean")
        ax.set_title(lab, fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        rate = metric in RATE_METRICS
        ax.set_ylabel(f"{metric} (%)" if rate else metric, fontsize=8)
        paper_axes(ax, [v for points in by_seed.values() for _, v in points], rate, True)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no {metric} logged", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    fig.tight_layout()
    return fig


def mean_curve(by_seed: dict[int, list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The mean over seeds at each step every seed logged.

    >>> mean_curve({0: [(1, 0.0), (2, 1.0)], 1: [(1, 1.0)]})
    [(1, 0.5)]
    """
    tables = [dict(points) for points in by_seed.values() if points]
    if not tables:
        return []
    steps = sorted(set.intersection(*(set(t) for t in tables)))
    return [(s, float(np.mean([t[s] for t in tables]))) for s in steps]


def sweep_curves(client, sweep_id: str, metric: str = ARMS_RACE_METRIC) -> dict[str, dict[int, list[tuple[int, float]]]]:
    out: dict[str, dict[int, list[tuple[int, float]]]] = {}
    for run in S.latest_by_key(S.find_runs(client, sweep_id)).values():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, metric))
        config, seed = S.config_and_seed(run)
        out.setdefault(config, {})[seed] = history
    return dict(sorted(out.items()))


def write_sweep_figures(tracker, sweep_id: str, report: dict, out: Path) -> list[Path]:
    """intervals.png and arms_race.png in ``out``."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if report["configs"]:
        fig = intervals(report)
        fig.savefig(out / "intervals.png", dpi=110)
        plt.close(fig)
        paths.append(out / "intervals.png")
    fig = arms_race(sweep_curves(tracker.client, sweep_id))
    fig.savefig(out / "arms_race.png", dpi=110)
    plt.close(fig)
    paths.append(out / "arms_race.png")
    return paths


# ====================================================================== axes a paper can print
def y_limits(values: list[float], percent: bool) -> tuple[float, float] | None:
    """Y limits where matplotlib's own would mislead: a rate's axis from 0 (to 100% at most, a little above its
    highest point, at least 0-5%), a constant curve's around its value from 0 (not 2.96 to 3.04, nor -0.04 to 0.04
    for a curve at 0); None: leave it to matplotlib.

    >>> y_limits([0.0, 0.0], True), y_limits([0.2, 0.5], True), y_limits([1.0, 1.0], True)
    ((0.0, 0.05), (0.0, 0.575), (0.0, 1.0))
    >>> y_limits([3.0, 3.0], False), y_limits([0.0], False), y_limits([-2.0, -2.0], False), y_limits([1.0, 4.0], False)
    ((0.0, 3.75), (0.0, 1.0), (-2.5, 0.0), None)
    """
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    if percent:
        return 0.0, min(1.0, max(0.05, 1.15 * hi))
    if hi - lo > 1e-9 * max(1.0, abs(hi)):
        return None
    return (0.0, 1.0) if hi == 0 else (0.0, 1.25 * hi) if hi > 0 else (1.25 * lo, 0.0)


def paper_axes(ax, values: list[float], percent: bool, integer_x: bool) -> None:
    """What every figure of the paper's sets does to its axes: whole ticks on an x axis that counts (steps,
    programs: no 1.2, 1.4, ...), a rate's y in % (as every chart of the UI), ``y_limits`` where matplotlib's
    own would mislead (a constant curve)."""
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    limits = y_limits(values, percent)
    if limits:
        ax.set_ylim(*limits)
    if percent:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    note = constant_note(values, percent)
    if note:  # the lines lie on one another (or on the axis): say so, or the figure looks empty
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, fontsize=8, color="#555555")


def constant_note(values: list[float], percent: bool) -> str | None:
    """"every curve constant at 0%": where all of a panel's values are one (lines drawn on one another).

    >>> constant_note([0.0, 0.0], True), constant_note([3.0, 3.0], False), constant_note([1.0, 2.0], False)
    ('every curve constant at 0%', 'every curve constant at 3', None)
    """
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if len(finite) < 2 or max(finite) - min(finite) > 1e-9 * max(1.0, abs(max(finite))):
        return None
    return f"every curve constant at {100 * finite[0]:.3g}%" if percent else f"every curve constant at {finite[0]:.3g}"
