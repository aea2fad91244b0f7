"""The Compare page's weakest / best member rows are the evaluation report's: cross-fitted when the samples files
are there (a pick on one half of the problems, scored on the other), the same labels and numbers as
``populora report`` prints, never the biased pick made on the very problems it is scored on."""

import json

import numpy as np
import pandas as pd
import pytest

from populora.evaluation import report
from populora.ui.compare_table import headline, report_ends, summarize


def _results(tmp, members: dict) -> dict:
    res, targets = {}, {}
    for label, (code, math) in members.items():
        files = {}
        for bench, verdicts, kind in (("humaneval_plus", code, "evalplus"), ("gsm8k", math, "math")):
            path = tmp / f"{label}-{bench}.jsonl"
            rows = [{"task_id": f"HumanEval/{i}", "base_status": "pass", "plus_status": "pass" if ok else "fail"}
                    if kind == "evalplus" else {"task_id": f"gsm8k/{i}", "correct": bool(ok)}
                    for i, ok in enumerate(verdicts)]
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            files[bench] = {"score": float(np.mean(verdicts)), "samples_file": str(path)}
        res[label], targets[label] = files, {"kind": "member", "alive": "true"}
    return {"results": res, "targets": targets, "config": {}}


def _frame(data: dict) -> pd.DataFrame:
    return pd.DataFrame({m: {f"eval/{b}/score": r["score"] for b, r in by.items()} for m, by in data["results"].items()}).T


def test_compare_shows_the_reports_cross_fitted_weakest_and_best(tmp_path):
    rng = np.random.default_rng(0)
    members = {m: (list(rng.integers(0, 2, 8)), list(rng.integers(0, 2, 12))) for m in ("T0", "T1", "S0", "S1")}
    data = _results(tmp_path, members)
    ends, crossed = report_ends(data, list(members))
    assert crossed and len(ends) == 2

    page = summarize(headline(_frame(data)), list(members), None, None, headline(_frame(data))["overall"],
                     picked={label: headline(row) for label, row in ends.items()})
    table = report.build(data)
    by_label = {r[0]: r for r in table.rows}
    for label in ends:
        assert label in by_label, (label, list(by_label))
        want = dict(zip(table.header, by_label[label]))
        for col in ("HumanEval+", "GSM8K"):  # the page in %, the report's table in fractions
            assert page.loc[label, col] == pytest.approx(100 * want[col])

    # the biased pick (lowest overall on the same problems) is what the page showed before; it differs here
    overall = headline(_frame(data))["overall"]
    biased_weakest = overall.idxmin()
    weakest_label = next(iter(ends))
    assert page.loc[weakest_label, "GSM8K"] != page.loc[biased_weakest, "GSM8K"] or \
        page.loc[weakest_label, "HumanEval+"] != page.loc[biased_weakest, "HumanEval+"]


def test_without_samples_files_the_page_says_its_pick_is_biased(tmp_path):
    data = _results(tmp_path, {"T0": ([1, 0], [1, 1]), "S0": ([0, 0], [1, 0])})
    for by in data["results"].values():
        for entry in by.values():
            entry["samples_file"] = str(tmp_path / "elsewhere.jsonl")  # written on another machine
    ends, crossed = report_ends(data, ["T0", "S0"])
    assert not crossed
    labels = list(ends)
    assert labels[0].startswith("weakest member (S0") and labels[1].startswith("best member (T0")
    assert labels == [r[0] for r in report.build(data).rows if r[0].startswith(("weakest", "best"))]
