"""scripts/arms_race_figures.py draws both arms' curves from a store with the layout `populora train` leaves."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import arms_race_figures  # noqa: E402
import synthetic_store  # noqa: E402


def test_figures_of_a_population_and_its_baseline(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    baseline, population, *_ = synthetic_store.build(uri, runs=1, members=4, tasks=24, steps=3)
    out = tmp_path / "figs"
    assert arms_race_figures.main(["--uri", uri, "--out", str(out)]) == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == len(arms_race_figures.RUN_METRICS) + len(arms_race_figures.RATINGS) + 1  # + the grid
    assert "arms-race.png" in pngs
    assert all((out / p).stat().st_size > 1000 for p in pngs)
    data = json.loads((out / "curves.json").read_text())
    assert (data["population"], data["baseline"]) == (population, baseline)
    coverage = data["curves"]["distinct program structures per 100 proposed"]
    assert [s for s, _ in coverage["population"]] == [1, 2, 3] and coverage["baseline"]
    assert len(data["curves"]["teacher rating (mean mu)"]["population"]) == 3
    # headline: first / last third and slope of every curve with 3+ points, as the curves say
    for row in data["headline"]:
        values = [v for _, v in data["curves"][row["curve"]][row["arm"]]]
        assert row["first"] == values[0] and row["last"] == values[-1] and row["steps"] == len(values)
        assert row["slope_low"] <= row["slope"] <= row["slope_high"]
    assert {r["arm"] for r in data["headline"]} == {"population", "baseline"}
    assert (out / "headline.md").read_text().count("\n") == len(data["headline"]) + 2
