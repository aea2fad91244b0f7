"""Draw a population run's and its baseline's curves (one PNG per metric) from an MLflow store.

    PYTHONPATH=. python scripts/arms_race_figures.py --uri sqlite:///mlflow.db --out docs/figures/arms-race \
        [--population RUN_ID] [--baseline RUN_ID]

Without run ids it takes the newest finished population run and its ``populora.baseline_run`` (else the newest
finished baseline). Run-level curves: validity, solve rate, AST depth, cyclomatic complexity, coverage per 100
programs proposed; member curves: the mean TrueSkill mu of the teachers and of the students at each step (the
baseline plays itself and is not rated). Also one figure with every curve (arms-race.png) and headline.md: each
curve's mean over the first and last third of the steps and its slope per step with a 95% interval. Needs
matplotlib and scipy.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

from populora.platform import runlayout as rl

RUN_METRICS = [(rl.VALIDITY_RATE, "task validity rate"), (rl.SOLVE_RATE, "student solve rate"),
               ("curriculum/ast_depth", "AST depth of teachers' programs"),
               ("curriculum/cyclomatic", "cyclomatic complexity of teachers' programs"),
               (rl.COVERAGE_PER_100, "distinct program structures per 100 proposed")]
RATINGS = [("teacher", "teacher rating (mean mu)"), ("student", "student rating (mean mu)")]


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of a metric, one value per step (the last logged), in step order."""
    by_step = {m.step: m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp)}
    return sorted(by_step.items())


def mean_rating(client, run_id: str, role: str) -> list[tuple[int, float]]:
    """Mean rating/mu over the members of ``role`` that have a value at each step."""
    values = defaultdict(list)
    for child in rl.member_runs(client, run_id):
        if child.data.tags.get(rl.ROLE) == role:
            for step, mu in history(client, child.info.run_id, "rating/mu"):
                values[step].append(mu)
    return sorted((s, sum(v) / len(v)) for s, v in values.items())


def pick_runs(client, population: str | None, baseline: str | None) -> tuple[str, str | None]:
    rows = [r for r in rl.list_runs(client) if r["status"] == rl.FINISHED]
    if not population:
        found = [r for r in rows if r["kind"] == rl.POPULATION]
        if not found:
            raise SystemExit("no finished population run in this store; pass --population")
        population = found[0]["run_id"]
    if not baseline:
        linked = client.get_run(population).data.tags.get(rl.BASELINE_RUN)
        newest = next((r["run_id"] for r in rows if r["kind"] == rl.BASELINE), None)
        baseline = linked or newest
    return population, baseline


def curves(client, population: str, baseline: str | None) -> dict[str, dict[str, list]]:
    """{metric title: {arm: [(step, value)]}} of every figure."""
    arms = {"population": population, **({"baseline": baseline} if baseline else {})}
    out = {title: {arm: history(client, rid, key) for arm, rid in arms.items()} for key, title in RUN_METRICS}
    for role, title in RATINGS:
        out[title] = {"population": mean_rating(client, population, role)}
    return out


def draw(data: dict[str, dict[str, list]], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for title, arms in data.items():
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for arm, points in arms.items():
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], marker=".", label=arm)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / (title.split(" (")[0].replace(" ", "_").replace("'", "") + ".png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def headline(data: dict[str, dict[str, list]]) -> list[dict]:
    """Per curve and arm: the mean over the first and the last third of the steps, and the least-squares slope
    per step with its 95% interval (scipy.stats.linregress). One seed per arm and steps that depend on each other:
    the interval says how straight the line is, not how a second seed would come out.

    >>> rows = headline({"x": {"population": [(s, float(s)) for s in range(1, 10)]}})
    >>> (rows[0]["first"], rows[0]["last"], round(rows[0]["slope"], 3))
    (2.0, 8.0, 1.0)
    """
    from scipy import stats

    rows = []
    for title, arms in data.items():
        for arm, points in arms.items():
            if len(points) < 3:
                continue
            steps, values = [float(s) for s, _ in points], [float(v) for _, v in points]
            third = max(1, len(values) // 3)
            fit = stats.linregress(steps, values)
            # a flat curve has no spread to fit: scipy returns a nan stderr, the slope is exactly 0
            half = 0.0 if math.isnan(fit.stderr) else stats.t.ppf(0.975, len(values) - 2) * fit.stderr
            rows.append({"curve": title, "arm": arm, "steps": len(values), "first": sum(values[:third]) / third,
                         "last": sum(values[-third:]) / third, "slope": float(fit.slope),
                         "slope_low": float(fit.slope - half), "slope_high": float(fit.slope + half)})
    return rows


def headline_markdown(rows: list[dict]) -> str:
    lines = ["| curve | arm | steps | first third | last third | slope per step (95% CI) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['curve']} | {r['arm']} | {r['steps']} | {r['first']:.3g} | {r['last']:.3g} | "
                     f"{r['slope']:+.3g} ({r['slope_low']:+.3g} to {r['slope_high']:+.3g}) |")
    return "\n".join(lines)


def draw_grid(data: dict[str, dict[str, list]], path: Path) -> Path:
    """Every curve in one figure (the one docs/arms-race.md shows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = -(-len(data) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, (title, arms) in zip(axes.flat, data.items()):
        for arm, points in arms.items():
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], marker=".", label=arm)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(data):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--uri", required=True, help="MLflow tracking URI, e.g. sqlite:///mlflow.db")
    p.add_argument("--out", default="docs/figures/arms-race", help="Folder the PNGs (and curves.json) go to")
    p.add_argument("--population", help="Population run id (default: the newest finished one)")
    p.add_argument("--baseline", help="Baseline run id (default: the population's baseline_run tag, else the newest)")
    args = p.parse_args(argv)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=args.uri)
    population, baseline = pick_runs(client, args.population, args.baseline)
    data = curves(client, population, baseline)
    out = Path(args.out)
    paths = draw(data, out) + [draw_grid(data, out / "arms-race.png")]
    rows = headline(data)
    (out / "curves.json").write_text(json.dumps({"population": population, "baseline": baseline, "curves": data,
                                                 "headline": rows}, indent=1))
    (out / "headline.md").write_text(headline_markdown(rows) + "\n")
    print("\n".join(str(x) for x in paths))
    print(headline_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
