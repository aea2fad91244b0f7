"""``populora bench learn --model embedded`` end to end on the planted preset's tiny base (the same code path as
the embedded model's hour, in seconds): the panel written by the base model, its answers before and after K
steps, the league's fit; the JSON's keys (``bench learn``'s ``start``, ``end``, ``rise``, ``interval``) and an
interval that holds the difference and is never zero width. The hour itself is docs/learning.md's, not a test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from populora.cli.bench import bench_main


@pytest.mark.slow
def test_bench_learn_panel_prints_start_end_and_an_interval_around_the_rise(tmp_path, capsys):
    out = tmp_path / "learn"
    assert bench_main(["learn", "--model", "embedded", "--preset", "planted", "--steps", "2", "--panel-tasks", "2",
                       "--panel-rounds", "2", "--answers", "2", "--window", "1", "--out", str(out), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    figures = json.loads(lines[-1])
    assert lines[-2].startswith("bench learn (embedded, planted, 2 steps): panel of")
    for key in ("start", "end", "rise", "interval", "solve_rate", "ability", "student", "teacher", "steps", "seconds"):
        assert key in figures, key
    lo, hi = figures["interval"]
    assert lo < hi and lo <= figures["rise"] <= hi
    assert figures["rise"] == pytest.approx(figures["end"] - figures["start"], abs=1e-12)
    for arm in ("base", "trained"):
        rate = figures["solve_rate"][arm]
        assert rate["ci95"][0] < rate["ci95"][1] and rate["ci95"][0] <= rate["value"] <= rate["ci95"][1]
    ab = figures["ability"]["trained"]
    assert ab["ci95"][0] < ab["ci95"][1] and ab["ci95"][0] <= ab["value"] <= ab["ci95"][1]
    assert len(figures["student"]["curve"]) == 2 and np.isfinite(figures["student"]["start"])
    assert all(len(v) == 2 for v in figures["diagnostics"].values())  # why a curve is flat, per step
    # the students the panel scored are the run's, after its last step; what the figures came from is kept
    assert [s["id"] for s in figures["league_students"]] == ["base", "s2.S0", "s2.S1"]
    assert json.loads((out / "learn.json").read_text()) == figures
    assert (out / "panel" / "panel.json").is_file() and (out / "panel" / "answers.jsonl").is_file()


def test_bench_learn_panel_refuses_bad_settings(capsys):
    with pytest.raises(SystemExit):
        bench_main(["learn", "--model", "embedded", "--steps", "0"])
    assert "--steps, --panel-tasks" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_main(["learn", "--model", "embedded", "--backend", "peft"])
    assert "runs on --backend multilora" in capsys.readouterr().err
