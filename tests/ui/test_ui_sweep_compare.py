"""The Compare page's sweep panel (issue 52): a sweep of two seeds, each a population run and its baseline run with
known per-problem verdicts, shows the scores `populora report --sweep` prints, cell for cell, with the population
mean worked out by hand, the baseline configuration in one row, and the report's comparison words."""

import json
import re

import pytest
import streamlit as st
from mlflow import MlflowClient
from streamlit.testing.v1 import AppTest

from populora.platform.store import runlayout as rl
from test_ui_pages import VIEWS, _ok, texts

SWEEP = "sw-test52"
# per seed, per-problem verdicts on gsm8k (6 problems): four members, and the seed's baseline
MEMBERS = {0: {"T0": [1, 1, 1, 0, 0, 0], "T1": [1, 1, 0, 0, 0, 0], "S0": [1, 0, 1, 0, 1, 0], "S1": [0, 0, 0, 0, 0, 0]},
           1: {"T0": [1, 1, 1, 1, 0, 0], "T1": [1, 0, 0, 0, 0, 0], "S0": [1, 1, 1, 0, 1, 0], "S1": [0, 1, 0, 0, 0, 0]}}
BASELINE = {0: [1, 0, 0, 0, 0, 0], 1: [1, 1, 0, 0, 0, 0]}


def _samples(tmp, name: str, verdicts: list[int]) -> dict:
    path = tmp / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"task_id": f"gsm8k/{i}", "correct": bool(v)}) + "\n" for i, v in enumerate(verdicts)))
    return {"gsm8k": {"score": sum(verdicts) / len(verdicts), "n": len(verdicts), "samples_file": str(path)}}


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory):
    import synthetic_store

    tmp = tmp_path_factory.mktemp("sweep_compare")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    _, population = synthetic_store.build(uri, runs=1, members=4, tasks=12, steps=2)  # a run for the page to show
    client = MlflowClient(uri)
    experiment = client.get_run(population).info.experiment_id
    for seed in (0, 1):
        for config, kind in (("default", rl.POPULATION), (rl.SWEEP_BASELINE, rl.BASELINE)):
            tags = {rl.KIND: kind, **rl.sweep_tags(SWEEP, f"{config}|seed={seed}", config, seed)}
            run = client.create_run(experiment, tags=tags)
            if kind == rl.POPULATION:
                results = {"results": {m: _samples(tmp, f"s{seed}-{m}", v) for m, v in MEMBERS[seed].items()},
                           "targets": {m: {"kind": "member", "alive": "true"} for m in MEMBERS[seed]}, "config": {}}
            else:
                results = {"results": {"baseline (B0)": _samples(tmp, f"s{seed}-B0", BASELINE[seed])},
                           "targets": {"baseline (B0)": {"kind": "baseline"}}, "config": {}}
            client.log_text(run.info.run_id, json.dumps(results), rl.eval_results_path())
            client.set_terminated(run.info.run_id, "FINISHED")
    return {"uri": uri, "population": population}


def test_the_sweep_panel_shows_the_reports_scores_and_words(sweep_store, monkeypatch, tmp_path, capsys):
    from populora.evaluation.cli import report_main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", sweep_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("POPULORA_SWEEPS_DIR", str(tmp_path / "sweeps"))
    assert report_main(["--sweep", SWEEP, "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "compare.py"), default_timeout=120)
    at.query_params["run"] = sweep_store["population"]
    _ok(at.run())
    assert "overall (mean of 1)" in printed.splitlines()[0]  # the report's heads, as the page's
    assert at.selectbox(key="cmp_sweep").value == SWEEP
    frame = next(d.value for d in at.dataframe if "arm" in d.value.columns)
    assert [tuple(x) for x in frame[["config", "arm"]].values] == [
        ("baseline", "population mean"), ("default", "population mean"), ("default", "weakest"), ("default", "best")]
    assert frame["seeds"].tolist() == [2, 2, 2, 2]
    assert list(frame.columns) == ["config", "seeds", "arm", "GSM8K", "math avg (1 of 7 incl. GSM8K)", "overall (mean of 1)"]
    pop = frame.set_index(["config", "arm"]).loc[("default", "population mean"), "GSM8K"]
    # by hand: seed 0 (3 + 2 + 3 + 0) / 24, seed 1 (4 + 1 + 4 + 1) / 24; over the two seeds 18 / 48 = 37.5%
    assert pop.startswith("37.5 [")
    base = frame.set_index(["config", "arm"]).loc[("baseline", "population mean"), "GSM8K"]
    assert base.startswith("25.0 [")  # (1 + 2) / 12
    for (config, arm), row in frame.set_index(["config", "arm"]).iterrows():  # each row as the report printed it
        cell = row["GSM8K"]
        line = [x for x in printed.splitlines() if re.match(rf"^{re.escape(config)}\s+0,1\s+{re.escape(arm)}\s", x)]
        assert len(line) == 1 and row["overall (mean of 1)"] == cell and cell in line[0], (config, arm, cell, printed)
    shown = texts(at) + "\n" + "\n".join(str(e.value) for e in at.success) + "\n" + "\n".join(str(e.value) for e in at.info)
    said = re.findall(r"^- (default: (?:population mean|weakest member) vs baseline.*)$", printed, re.MULTILINE)
    assert len(said) == 2, printed
    for words in said:
        assert words in shown, words
