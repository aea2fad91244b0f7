"""The paper's figure set of one run (and its baseline) or of a sweep (each arm's mean over seeds, with a band):
validity, solve rate, the complexity of teachers' programs, diversity at equal volume, and ratings.

Every figure that compares arms compares them at equal volume: the coverage curve's x axis is the number of
valid programs teachers wrote (not the step), the rarefaction curves give each arm's expected distinct
structures among the same m programs, and the diversity-over-training curve rarefies every arm to the same m.
Each figure is written as PNG, SVG and PDF with its numbers beside it (CSV) and a caption saying what was
compared at what volume; ``figures.json`` holds everything, ``captions.md`` the captions and the headline table.

Reads go through ``load_arm`` (MLflow metrics, the member runs' ratings, the per-step task tables); the rest
(``aggregate``, ``headline``, ``build``) is pure and works on plain lists.
"""

from __future__ import annotations

import csv
import json
import math
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

from populora.platform.store import runlayout as rl
from populora.evaluation.figures import paper_axes
from populora.platform.store import sweep as S
from populora.training.measures import diversity
from populora.training.measures.curriculum import structure_key
from populora.training.tasks import PROGRAM_KINDS

STEP_METRICS = [(rl.VALIDITY_RATE, "validity", "task validity rate"),
                (rl.SOLVE_RATE, "solve_rate", "student solve rate"),
                ("curriculum/ast_depth", "ast_depth", "AST depth of teachers' programs"),
                ("curriculum/cyclomatic", "cyclomatic", "cyclomatic complexity of teachers' programs"),
                ("curriculum/loc", "loc", "lines of code of teachers' programs"),
                ("curriculum/variables", "variables", "variables in teachers' programs")]
RATES = {"validity", "solve_rate"}  # shares in 0-1, drawn in % (as every chart of the UI draws them)
INTEGER_X = ("step", "valid programs teachers wrote", "m (programs drawn)")  # x axes that count: whole ticks
RATINGS = [("teacher", "teacher_rating", "teacher rating (mean TrueSkill mu)"),
           ("student", "student_rating", "student rating (mean TrueSkill mu)")]
FORMATS = ("png", "svg", "pdf")
X_AXES = ("step", "compute")  # what the per-step curves are drawn against: the step, or per-adapter compute
COMPUTE_LABEL = "per-adapter compute (generated + trained tokens)"
YLABELS = {"validity": "valid tasks (%)", "solve_rate": "answers correct (%)", "ast_depth": "AST depth",
           "cyclomatic": "cyclomatic complexity", "loc": "lines of code", "variables": "variables",
           "teacher_rating": "TrueSkill mu", "student_rating": "TrueSkill mu"}  # the y axis's quantity and unit
# each arm its own line style and marker, not only its colour (a print in grey, colour-blind readers): the
# baseline dashed with squares, population arms solid with circles, triangles, diamonds, ...
BASELINE_STYLE = {"color": "0.25", "ls": "--", "marker": "s"}
ARM_MARKERS = ("o", "^", "D", "v", "P", "X")


class FiguresError(ValueError):
    """Bad input: no such run or sweep, or nothing to draw."""


@dataclass
class Arm:
    """One arm's seeds: {metric: {seed: [(x, y)]}} and each seed's structures in proposal order."""

    name: str
    runs: dict[int, str] = field(default_factory=dict)                    # seed -> run id
    curves: dict[str, dict[int, list]] = field(default_factory=lambda: defaultdict(dict))
    structures: dict[int, list[tuple[int, str, str]]] = field(default_factory=dict)  # seed -> [(step, kind, key)]
    compute: dict[int, dict[int, float]] = field(default_factory=dict)  # seed -> {step: per-adapter tokens so far}


# ====================================================================== reads
def metric_history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value), the last value logged at each step, in step order."""
    by_step = {m.step: m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp)}
    return sorted(by_step.items())


def mean_rating(client, run_id: str, role: str) -> list[tuple[int, float]]:
    """Mean rating/mu over the members of ``role`` that have a value at each step."""
    values = defaultdict(list)
    for child in rl.member_runs(client, run_id):
        if child.data.tags.get(rl.ROLE) == role:
            for step, mu in metric_history(client, child.info.run_id, "rating/mu"):
                values[step].append(mu)
    return sorted((s, float(np.mean(v))) for s, v in values.items())


def structures(client, run_id: str) -> list[tuple[int, str, str]]:
    """(step, kind, structure key) of every valid program teachers wrote, in proposal order, from the task
    tables (one download of the run's ``tasks`` folder)."""
    import mlflow

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=rl.TASKS, dst_path=tmp,
                                                             tracking_uri=client.tracking_uri))
        except Exception:  # noqa: BLE001 - a run that logged no step yet has no tasks folder
            return []
        for path in sorted(local.glob("step_*.json")):
            columns, rows = rl.table_rows(json.loads(path.read_text()))
            for row in (dict(zip(columns, r)) for r in rows):
                if row.get("valid") and row.get("kind") in PROGRAM_KINDS and row.get("teacher") not in ("seed", None):
                    try:
                        out.append((int(row["step"]), row["kind"], structure_key(row["program"])))
                    except SyntaxError:
                        continue
    return out


def load_arm(client, name: str, runs: dict[int, str], ratings: bool) -> Arm:
    arm = Arm(name, dict(runs))
    for seed, run_id in runs.items():
        for key, slug, _ in STEP_METRICS:
            arm.curves[slug][seed] = metric_history(client, run_id, key)
        if ratings:
            for role, slug, _ in RATINGS:
                arm.curves[slug][seed] = mean_rating(client, run_id, role)
        arm.structures[seed] = structures(client, run_id)
        arm.compute[seed] = compute_by_step(client, run_id)
    return arm


def compute_by_step(client, run_id: str) -> dict[int, float]:
    """{step: the run's per-adapter generated + trained tokens after it} (its ledger, ``compute/per_adapter/*``)."""
    gen, trained = (dict(metric_history(client, run_id, rl.COMPUTE_PER_ADAPTER[q])) for q in ("generated_tokens", "trained_tokens"))
    return {s: gen[s] + trained[s] for s in sorted(set(gen) & set(trained))}


def run_arms(client, run_id: str, baseline: str | None = None) -> list[Arm]:
    """A run and its baseline (``--baseline``, else the run's ``populora.baseline_run`` link), one seed each."""
    try:
        run = client.get_run(run_id)
    except Exception as err:  # noqa: BLE001
        raise FiguresError(f"no run {run_id!r} in this store ({str(err)[:120]})") from None
    kind = run.data.tags.get(rl.KIND)
    if kind is None:
        raise FiguresError(f"run {run_id} is not a PopuLoRA training run (no {rl.KIND} tag)")
    baseline = baseline or (run.data.tags.get(rl.BASELINE_RUN) or None if kind == rl.POPULATION else None)
    arms = [load_arm(client, "population" if kind == rl.POPULATION else "baseline", {0: run_id}, kind == rl.POPULATION)]
    if baseline:
        arms.append(load_arm(client, "baseline", {0: baseline}, False))
    return arms


def sweep_arms(client, sweep_id: str) -> list[Arm]:
    """One arm per configuration of the sweep (the baseline last), its seeds' runs (a FINISHED one per key)."""
    by_config: dict[str, dict[int, str]] = defaultdict(dict)
    kinds = {}
    for run in S.latest_by_key(S.find_runs(client, sweep_id)).values():
        config, seed = S.config_and_seed(run)
        by_config[config][seed] = run.info.run_id
        kinds[config] = run.data.tags.get(rl.KIND)
    if not by_config:
        raise FiguresError(f"no run of sweep {sweep_id!r} in this store (list sweeps on the Runs page)")
    order = sorted(by_config, key=lambda c: (kinds[c] == rl.BASELINE, c))
    return [load_arm(client, "baseline" if kinds[c] == rl.BASELINE else c, by_config[c], kinds[c] == rl.POPULATION)
            for c in order]


# ====================================================================== pure: curves with bands
def aggregate(by_seed: dict[int, list[tuple[float, float]]]) -> list[dict]:
    """Mean over seeds at each x every seed has, with a band of one standard error (none with one seed).

    >>> aggregate({0: [(1, 0.0), (2, 1.0)], 1: [(1, 1.0), (2, 1.0), (3, 0.5)]})
    [{'x': 1, 'mean': 0.5, 'low': 0.0, 'high': 1.0, 'seeds': 2}, {'x': 2, 'mean': 1.0, 'low': 1.0, 'high': 1.0, 'seeds': 2}]
    """
    tables = [dict(points) for points in by_seed.values() if points]
    if not tables:
        return []
    out = []
    for x in sorted(set.intersection(*(set(t) for t in tables))):
        v = np.array([t[x] for t in tables], dtype=float)
        se = float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0
        out.append({"x": x, "mean": float(v.mean()), "low": float(v.mean() - se), "high": float(v.mean() + se), "seeds": len(v)})
    return out


def against_compute(points: list[tuple[int, float]], compute: dict[int, float]) -> list[tuple[float, float]]:
    """A seed's (step, y) curve re-read as (per-adapter compute after that step, y); steps without a ledger
    value are left out.

    >>> against_compute([(1, 0.5), (2, 0.7), (3, 0.9)], {1: 100.0, 2: 250.0})
    [(100.0, 0.5), (250.0, 0.7)]
    """
    return [(compute[s], y) for s, y in points if s in compute]


def aggregate_compute(by_seed: dict[int, list[tuple[float, float]]], points: int = 24) -> list[dict]:
    """``aggregate`` for curves against compute: seeds spend different amounts per step, so each seed is
    interpolated onto a common grid over the compute range all of them cover (one seed: its own points).

    >>> aggregate_compute({0: [(0.0, 0.0), (10.0, 1.0)], 1: [(0.0, 1.0), (20.0, 1.0)]}, points=3)[1]
    {'x': 5.0, 'mean': 0.75, 'low': 0.5, 'high': 1.0, 'seeds': 2}
    """
    curves = [sorted(c) for c in by_seed.values() if c]
    if len(curves) <= 1:
        return aggregate(by_seed)
    lo, hi = max(c[0][0] for c in curves), min(c[-1][0] for c in curves)
    if hi < lo:
        return []
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    on_grid = {i: [(float(x), float(y)) for x, y in zip(grid, np.interp(grid, [p[0] for p in c], [p[1] for p in c]))]
               for i, c in enumerate(curves)}
    return aggregate(on_grid)


def coverage_curves(arm: Arm) -> dict[int, list[tuple[int, float]]]:
    """Per seed: distinct structures after n valid programs (x = n), the coverage curve at equal program counts."""
    return {seed: list(enumerate(diversity.accumulation(k for _, _, k in rows), start=1)) for seed, rows in arm.structures.items()}


def rarefaction_curves(arm: Arm, m_max: int, kind: str | None = None, points: int = 30) -> dict[int, list]:
    """Per seed: expected distinct structures among m programs drawn from all the seed wrote (of ``kind``), at
    up to ``points`` values of m from 1 to ``m_max``."""
    ms = sorted({max(1, round(m_max * i / points)) for i in range(1, points + 1)})
    out = {}
    for seed, rows in arm.structures.items():
        keys = [k for _, kd, k in rows if kind is None or kd == kind]
        if keys:
            c = diversity.counts(keys)
            out[seed] = [(m, diversity.rarefied(c, m)) for m in ms if m <= len(keys)]
    return out


def diversity_over_steps(arm: Arm, m: int) -> dict[int, list[tuple[int, float]]]:
    """Per seed: at each step, the expected distinct structures among m programs drawn from those written so far
    (from the step where there are m)."""
    out = {}
    for seed, rows in arm.structures.items():
        points, keys = [], []
        for step in sorted({s for s, _, _ in rows}):
            keys = [k for s, _, k in rows if s <= step]
            if len(keys) >= m:
                points.append((step, diversity.rarefied(diversity.counts(keys), m)))
        out[seed] = points
    return out


def ci_text(e: dict, fmt: str) -> str:
    """An estimate's interval as the table prints it, "(a to b)"; none where it collapsed (the bootstrap of one
    structure repeated, Chao1 without singletons: nothing in the sample sizes one), never "(1.00 to 1.00)".

    >>> ci_text({"low": 1.5, "high": 2.5}, ".2f"), ci_text({"low": 1.0, "high": 1.0}, ".2f")
    ('(1.50 to 2.50)', '(no interval: the sample has no spread to size one)')
    """
    lo, hi = format(e["low"], fmt), format(e["high"], fmt)
    return "(no interval: the sample has no spread to size one)" if lo == hi else f"({lo} to {hi})"


def headline(curves: dict[str, dict[str, list[dict]]], scale: float = 1.0) -> list[dict]:
    """Per curve and arm (its mean over seeds): the mean of the first and the last third of the points, and the
    least-squares slope with its 95% interval (scipy linregress); ``scale``: x is multiplied by it first (compute
    in millions of tokens). Points that depend on each other: the interval says how straight the line is, not how
    another seed would come out. Points exactly on a line (a flat curve: a rate that stayed 0) leave no residual to
    size an interval from: the slope is given without one (``slope_low`` None), never as a zero-width interval.

    >>> rows = headline({"x": {"population": [{"x": s, "mean": float(s)} for s in range(1, 10)]}})
    >>> (rows[0]["first"], rows[0]["last"], round(rows[0]["slope"], 3), rows[0]["slope_low"])
    (2.0, 8.0, 1.0, None)
    """
    rows = []
    for title, arms in curves.items():
        for arm, points in arms.items():
            if len(points) < 2:
                continue
            xs, values = [scale * float(p["x"]) for p in points], [float(p["mean"]) for p in points]
            third = max(1, len(values) // 3)
            row = {"curve": title, "arm": arm, "points": len(values), "first": sum(values[:third]) / third,
                   "last": sum(values[-third:]) / third, "slope": None, "slope_low": None, "slope_high": None}
            if len(values) >= 3 and len(set(xs)) > 1:  # a slope's interval needs a residual: three points at least
                fit = stats.linregress(xs, values)
                row["slope"] = float(fit.slope)
                if np.isfinite(fit.stderr) and fit.stderr > 0:
                    half = stats.t.ppf(0.975, len(values) - 2) * fit.stderr
                    row.update(slope_low=float(fit.slope - half), slope_high=float(fit.slope + half))
            rows.append(row)
    return rows


def headline_markdown(rows: list[dict], percent: set[str] = frozenset(), per: str = "step") -> str:
    """The headline table; ``percent``: the curves that are rates (shown in %, slopes in points per ``per``). Where
    it has no row, or no slope, or no interval of a slope, it says why.

    >>> print(headline_markdown([]))
    No headline: every curve over training has fewer than 2 points (the runs logged fewer than 2 steps).
    >>> print(headline_markdown(headline({"v": {"population": [{"x": 1, "mean": 0.25}, {"x": 2, "mean": 0.5}]}}), {"v"}))
    | curve | arm | points | first third | last third | slope per step (95% CI) |
    |---|---|---|---|---|---|
    | v | population | 2 | 25.0% | 50.0% | – |
    <BLANKLINE>
    Slopes need 3 points or more (a line through 2 has no interval): – where a curve has fewer.
    <BLANKLINE>
    Rates in %; their slopes in percentage points per step.
    >>> print(headline_markdown(headline({"v": {"population": [{"x": s, "mean": 0.0} for s in (1, 2, 3)]}})))
    | curve | arm | points | first third | last third | slope per step (95% CI) |
    |---|---|---|---|---|---|
    | v | population | 3 | 0 | 0 | +0 (no interval) |
    <BLANKLINE>
    No interval: the points lie exactly on a line (a flat curve: the same value at every step), no residual to size one from.
    """
    if not rows:
        return "No headline: every curve over training has fewer than 2 points (the runs logged fewer than 2 steps)."
    lines = [f"| curve | arm | points | first third | last third | slope per {per} (95% CI) |", "|---|---|---|---|---|---|"]
    for r in rows:
        pct = r["curve"] in percent
        val = (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.3g}")
        sl = (lambda v, g=3: f"{100 * v:+.{g}g}") if pct else (lambda v, g=3: f"{v:+.{g}g}")
        if r["slope"] is None:
            slope = "–"
        elif r["slope_low"] is None:
            slope = f"{sl(r['slope'])} (no interval)"
        else:  # digits enough that the interval's ends read apart (a near-exact line: "+0.5 (+0.5 to +0.5)")
            g = next((g for g in range(3, 16) if sl(r["slope_low"], g) != sl(r["slope_high"], g)), 16)
            slope = f"{sl(r['slope'], g)} ({sl(r['slope_low'], g)} to {sl(r['slope_high'], g)})"
        lines.append(f"| {r['curve']} | {r['arm']} | {r['points']} | {val(r['first'])} | {val(r['last'])} | {slope} |")
    if any(r["slope"] is None for r in rows):
        lines += ["", "Slopes need 3 points or more (a line through 2 has no interval): – where a curve has fewer."]
    if any(r["slope"] is not None and r["slope_low"] is None for r in rows):
        lines += ["", f"No interval: the points lie exactly on a line (a flat curve: the same value at every {per}), "
                      "no residual to size one from."]
    if percent & {r["curve"] for r in rows}:
        lines += ["", f"Rates in %; their slopes in percentage points per {per}."]
    return "\n".join(lines)


# ====================================================================== pure: the figure set
def _seed_note(arms: list[Arm]) -> str:
    seeds = {a.name: len(a.runs) for a in arms}
    if max(seeds.values()) > 1:
        return ("Lines: the mean over seeds (" + ", ".join(f"{a}: {n} seeds" for a, n in seeds.items())
                + "); band: one standard error over seeds.")
    return "One seed per arm: no band over seeds."


def equal_volume_table(arms: list[Arm]) -> dict:
    """Each arm at the same m (the fewest valid programs any seed of any arm wrote): per seed the rarefied
    distinct structures with its bootstrap interval, and Chao1; per arm their mean over seeds."""
    sizes = [len(rows) for a in arms for rows in a.structures.values()]
    m = min(sizes) if sizes and min(sizes) > 0 else 0
    out = {"m": m, "arms": {}}
    if not m:
        return out
    for a in arms:
        seeds = {}
        for seed, rows in a.structures.items():
            c = diversity.counts(k for _, _, k in rows)
            seeds[seed] = {"n": len(rows), "observed": len(c), "rarefied": diversity.rarefy(c, m).to_dict(),
                           "chao1": diversity.chao1(c).to_dict(), "per_100": diversity.per_100(len(c), len(rows))}
        values = [s["rarefied"]["value"] for s in seeds.values()]
        out["arms"][a.name] = {"seeds": seeds, "rarefied_mean": float(np.mean(values))}
    return out


def build(arms: list[Arm], x: str = "step") -> list[dict]:
    """Every figure of the set: {slug, title, xlabel, caption, series: {arm: [{x, mean, low, high}]}}. ``x``
    "compute": the per-step curves against per-adapter compute (each run's ledger), so arms are read at equal
    spend, as the paper's claim is worded (slugs end in ``_by_compute``)."""
    note = _seed_note(arms)
    figures = []
    for _, slug, title in STEP_METRICS + RATINGS:
        if x == "compute":
            series = {a.name: aggregate_compute({seed: against_compute(c, a.compute.get(seed, {}))
                                                 for seed, c in a.curves.get(slug, {}).items()}) for a in arms}
        else:
            series = {a.name: aggregate(a.curves.get(slug, {})) for a in arms}
        series = {k: v for k, v in series.items() if v}
        interpolated = any(p["seeds"] > 1 for points in series.values() for p in points)
        if series and x == "compute":
            figures.append({"slug": f"{slug}_by_compute", "title": title, "xlabel": COMPUTE_LABEL, "series": series,
                            "percent": slug in RATES, "ylabel": YLABELS.get(slug, ""), "interpolated": interpolated,
                            "caption": f"{title} against per-adapter training compute (the runs' ledgers: generated + "
                                       f"trained tokens per adapter; {', '.join(series)}"
                                       + ("; in %" if slug in RATES else "") + "), so arms are compared at equal spend"
                                       + ("; seeds spend differently per step, so each is interpolated onto a common "
                                          "compute grid (lines without markers)" if interpolated else
                                          "; a marker per logged step") + f". {note}"})
        elif series:
            figures.append({"slug": slug, "title": title, "xlabel": "step", "series": series, "percent": slug in RATES,
                            "ylabel": YLABELS.get(slug, ""),
                            "caption": f"{title} per training step ({', '.join(series)}"
                                       + ("; in %" if slug in RATES else "") + f"). {note}"})
    sizes = [len(rows) for a in arms for rows in a.structures.values() if rows]
    if not sizes:
        return figures
    smallest, largest = min(sizes), max(sizes)
    series = {a.name: aggregate(coverage_curves(a)) for a in arms}
    figures.append({"slug": "coverage_equal_volume", "title": "distinct structures by programs written",
                    "xlabel": "valid programs teachers wrote", "series": series, "compare_at": smallest,
                    "caption": "Coverage at equal program counts: distinct program structures (names and constants "
                               "abstracted) after the first n valid programs each arm's teachers wrote, so arms are "
                               f"read at the same x. Arms wrote {smallest} to {largest} programs; the mean over "
                               f"seeds stops where its shortest seed stops. {note}"})
    series = {a.name: rarefaction_band(a, largest) for a in arms}
    figures.append({"slug": "rarefaction", "title": "rarefaction: distinct structures among m programs",
                    "xlabel": "m (programs drawn)", "series": series, "compare_at": smallest,
                    "caption": "Expected distinct structures among m valid programs drawn without replacement from "
                               "all each arm wrote (hypergeometric rarefaction); compare arms at the same m, up to "
                               f"the smaller arm's {smallest}. Band: bootstrap 95% interval with one seed, else one "
                               f"standard error over seeds. {note}"})
    m = min(smallest, 20)
    series = {a.name: aggregate(diversity_over_steps(a, m)) for a in arms}
    figures.append({"slug": "diversity_equal_volume", "title": f"distinct structures among {m} programs, over training",
                    "xlabel": "step", "series": {k: v for k, v in series.items() if v}, "ylim": [0, m],
                    "caption": f"Diversity at equal volume over training: at each step, the expected distinct "
                               f"structures among {m} programs drawn from those each arm wrote so far (every arm "
                               f"rarefied to the same {m}). {note}"})
    for kind in PROGRAM_KINDS:
        of_kind = [sum(1 for _, kd, _ in rows if kd == kind) for a in arms for rows in a.structures.values()]
        if of_kind and min(of_kind) > 1:
            series = {a.name: rarefaction_band(a, max(of_kind), kind) for a in arms}
            figures.append({"slug": f"rarefaction_{kind}", "title": f"rarefaction, {kind} tasks",
                            "xlabel": "m (programs drawn)", "series": series,
                            "caption": f"As the rarefaction figure, for the programs of {kind} tasks only (the "
                                       f"smaller arm wrote {min(of_kind)}). {note}"})
    return figures


def rarefaction_band(arm: Arm, m_max: int, kind: str | None = None) -> list[dict]:
    """One seed: the rarefaction curve with its bootstrap 95% interval; several: mean over seeds, one s.e."""
    curves = rarefaction_curves(arm, m_max, kind)
    if len(curves) != 1:
        return aggregate(curves)
    (seed, points), = curves.items()
    c = diversity.counts(k for _, kd, k in arm.structures[seed] if kind is None or kd == kind)
    out = []
    for m, _ in points:
        e = diversity.rarefy(c, m, boot=100)
        out.append({"x": m, "mean": e.value, "low": e.low, "high": e.high, "seeds": 1})
    return out


# ====================================================================== files
def check_formats(formats: tuple[str, ...]) -> None:
    if not formats or set(formats) - set(FORMATS):
        raise FiguresError(f"formats must be among {', '.join(FORMATS)}, got {', '.join(formats) or 'none'}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _axes(ax, fig: dict) -> None:
    """Whole ticks on counting x axes (steps, programs), rates in %, a sensible y range for constant data."""
    values = [v for points in fig["series"].values() for p in points for v in (p["mean"], p["low"], p["high"])]
    paper_axes(ax, values, bool(fig.get("percent")), fig["xlabel"] in INTEGER_X)
    if fig.get("ylim"):  # the quantity's own range (1 to m distinct among m): not a zoom on a 0.01 wobble
        ax.set_ylim(fig["ylim"][0], fig["ylim"][1] * 1.05)
    if fig["xlabel"] == COMPUTE_LABEL:  # token counts: whole numbers with thousands separators, never 1e4 offsets
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    if fig.get("ylabel") or fig.get("percent"):
        ax.set_ylabel(fig.get("ylabel") or "%", fontsize=8)


def _panel(ax, fig: dict) -> None:
    arms = [a for a in fig["series"] if a != "baseline"]
    for arm, points in fig["series"].items():
        style = (dict(BASELINE_STYLE) if arm == "baseline" else
                 {"color": f"C{arms.index(arm)}", "ls": "-", "marker": ARM_MARKERS[arms.index(arm) % len(ARM_MARKERS)]})
        if fig.get("interpolated") or len(points) >= 40:  # markers only where something was measured
            style["marker"] = None
        xs = [p["x"] for p in points]
        # drawn over the frame (a rate of 0% or 100%, a curve on the axis: not hidden or cut by it)
        ax.plot(xs, [p["mean"] for p in points], ms=4, lw=1.4, label=arm, clip_on=False, zorder=3, **style)
        if any(p["high"] > p["low"] for p in points):
            ax.fill_between(xs, [p["low"] for p in points], [p["high"] for p in points], color=style["color"],
                            alpha=0.15 if arm == "baseline" else 0.2, lw=0)
    if fig.get("compare_at"):  # the volume the arms are compared at
        ax.axvline(fig["compare_at"], color="black", lw=0.8, ls=":", label=f"compared at {fig['compare_at']}")
    ax.set_title(fig["title"], fontsize=9)
    ax.set_xlabel(fig["xlabel"], fontsize=8)
    _axes(ax, fig)
    ax.grid(alpha=0.3)
    if fig["series"]:
        ax.legend(fontsize=7)


def write(figures: list[dict], out: Path, meta: dict, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Each figure in ``formats`` (PNG/SVG/PDF) and CSV, all of them in one grid (figure-set.png), figures.json
    (numbers, captions, ``meta``) and captions.md."""
    check_formats(formats)
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fig in figures:
        f, ax = plt.subplots(figsize=(5, 3.3))
        _panel(ax, fig)
        f.tight_layout()
        for fmt in formats:
            f.savefig(out / f"{fig['slug']}.{fmt}", dpi=130)
            paths.append(out / f"{fig['slug']}.{fmt}")
        plt.close(f)
        with open(out / f"{fig['slug']}.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["arm", fig["xlabel"], "mean", "low", "high", "seeds"])
            for arm, points in fig["series"].items():
                for p in points:
                    w.writerow([arm, p["x"], p["mean"], p["low"], p["high"], p["seeds"]])
        paths.append(out / f"{fig['slug']}.csv")
    cols = 3
    rows = max(1, -(-len(figures) // cols))
    f, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.1 * rows), squeeze=False)
    for ax, fig in zip(axes.flat, figures):
        _panel(ax, fig)
    for ax in list(axes.flat)[len(figures):]:
        ax.axis("off")
    f.tight_layout()
    f.savefig(out / "figure-set.png", dpi=100)
    plt.close(f)
    paths.append(out / "figure-set.png")
    # the curves over training: against the step, or (``--x compute``) per-adapter compute, in millions of tokens
    # (the headline read only "step" figures, and said of compute runs that logged 6 steps "fewer than 2")
    compute = any(fig["xlabel"] == COMPUTE_LABEL for fig in figures)
    over = COMPUTE_LABEL if compute else "step"
    rows_ = headline({fig["title"]: fig["series"] for fig in figures if fig["xlabel"] == over}, 1e-6 if compute else 1.0)
    per = "million tokens (per adapter)" if compute else "step"
    (out / "figures.json").write_text(json.dumps({**meta, "figures": figures, "headline": rows_}, indent=1))
    text = [f"# Figures: {meta.get('title', '')}", ""]
    text += [f"- **{fig['slug']}** ({', '.join(formats)}, csv): {fig['caption']}" for fig in figures]
    ev = meta.get("equal_volume", {})
    if ev.get("m"):
        text += ["", f"## Diversity at equal volume (m = {ev['m']} valid programs)", "",
                 "| arm | seed | programs | distinct | rarefied to m (95% CI) | Chao1 (95% CI) | per 100 (volume-biased) |",
                 "|---|---|---|---|---|---|---|"]
        for arm, a in ev["arms"].items():
            for seed, s in a["seeds"].items():
                r, c = s["rarefied"], s["chao1"]
                text.append(f"| {arm} | {seed} | {s['n']} | {s['observed']} | {r['value']:.2f} {ci_text(r, '.2f')} "
                            f"| {c['value']:.1f} {ci_text(c, '.1f')} | {s['per_100']:.1f} |")
    rates = {fig["title"] for fig in figures if fig.get("percent")}
    text += ["", f"## Headline (curves over {'compute' if compute else 'steps'})", "", headline_markdown(rows_, rates, per), ""]
    (out / "captions.md").write_text("\n".join(text))
    return paths + [out / "figures.json", out / "captions.md"]


def figure_set(client, out: Path, run_id: str | None = None, sweep_id: str | None = None,
               baseline: str | None = None, formats: tuple[str, ...] = FORMATS, x: str = "step") -> list[Path]:
    """Load the arms of a run (and its baseline) or of a sweep, build the figures, write them under ``out``;
    ``x``: the per-step curves against the step or per-adapter compute."""
    if bool(run_id) == bool(sweep_id):
        raise FiguresError("give a run (--run RUN_ID) or a sweep (--sweep SWEEP_ID), one of them")
    if x not in X_AXES:
        raise FiguresError(f"unknown x axis {x!r}; choose one of {', '.join(X_AXES)}")
    check_formats(formats)
    arms = sweep_arms(client, sweep_id) if sweep_id else run_arms(client, run_id, baseline)
    figures = build(arms, x)
    if not figures:
        raise FiguresError("nothing to draw: the runs logged no step yet")
    meta = {"title": f"sweep {sweep_id}" if sweep_id else f"run {run_id}", "sweep": sweep_id,
            "arms": {a.name: {str(s): r for s, r in a.runs.items()} for a in arms}, "equal_volume": equal_volume_table(arms)}
    return write(figures, out, meta, formats)
