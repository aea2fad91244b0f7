"""Draw a population run's and its baseline's figure set from an MLflow store: a thin wrapper over
``populora figures --run`` (``populora.training.measures.paper_figures``) that picks the runs when none is named.

    PYTHONPATH=. python scripts/arms_race_figures.py --uri sqlite:///mlflow.db --out docs/figures/arms-race \
        [--population RUN_ID] [--baseline RUN_ID] [--formats png,svg,pdf]

Without run ids it takes the newest finished population run and its ``populora.baseline_run`` (else the newest
finished baseline). What it writes: see ``populora figures --help`` and docs/arms-race.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import client as tracking_client
from populora.training.measures.paper_figures import figure_set


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--uri", required=True, help="MLflow tracking URI, e.g. sqlite:///mlflow.db")
    p.add_argument("--out", default="docs/figures/arms-race", help="Folder the figures (and figures.json) go to")
    p.add_argument("--population", help="Population run id (default: the newest finished one)")
    p.add_argument("--baseline", help="Baseline run id (default: the population's baseline_run tag, else the newest)")
    p.add_argument("--formats", default="png,svg,pdf", help="comma-separated, among png, svg, pdf")
    args = p.parse_args(argv)
    client = tracking_client(args.uri)
    population, baseline = pick_runs(client, args.population, args.baseline)
    paths = figure_set(client, Path(args.out), run_id=population, baseline=baseline,
                       formats=tuple(f for f in args.formats.split(",") if f))
    print("\n".join(str(x) for x in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
