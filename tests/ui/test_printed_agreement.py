"""The same numbers wherever a verdict is printed (issue 52): `populora report`'s table (``verdict.text``, what the
CLI prints), its --json (the verdict dict, through JSON and back), the Compare page's tables
(``compare_table.verdict_frame`` and ``aggregates_frame``) and rliable's aggregates in the report's words. Over the
input space of a first evaluation (hypothesis): 1-3 benchmarks of 1 to 2,000 problems, arms all 0, all 1, spread or
rare, ties and an arm identical to the baseline, 1-16 samples per problem, with and without a base model. Every
printed number lies within its scale and every printed interval contains its estimate."""

import json
import re

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.evaluation.harness.benchmarks import BENCHMARKS
from populora.evaluation.report import printed_averages
from populora.evaluation.statistics import calibration_worlds, sweep_report, verdict
from populora.evaluation.summary import Results
from populora.ui.compare_table import aggregates_frame, headline, scored_only, verdict_frame
from populora.ui.sweeps import config_rows

MEMBERS = ("T0", "T1", "S0", "S1")
BASELINE = "baseline (B0)"
NUMBER = r"[+-]?\d+\.\d+"
DELTA = re.compile(rf"({NUMBER}) \[({NUMBER}), ({NUMBER})\]")


@st.composite
def evaluations(draw, seeds: int = 1) -> list[Results]:
    """``seeds`` results.json in memory (as the calibration's worlds build them), one per training seed: four
    members, the baseline and maybe the base model, on the same problems of 1-3 benchmarks."""
    names = draw(st.lists(st.sampled_from(["gsm8k", "humaneval_plus", "aime24", "math500"]), min_size=1, max_size=3,
                          unique=True))
    sizes = {b: draw(st.one_of(st.integers(1, 30), st.integers(1, 2000))) for b in names}
    samples = draw(st.integers(1, 16))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    arms = [*MEMBERS, BASELINE] + (["base model"] if draw(st.booleans()) else [])
    tie = draw(st.sampled_from([None, *MEMBERS]))  # a member identical to the baseline (ties on every problem)
    kind = {(a, b): draw(st.sampled_from(["zero", "one", "spread", "rare"])) for a in arms for b in names}
    p = {k: {"zero": np.zeros(sizes[k[1]]), "one": np.ones(sizes[k[1]]), "spread": rng.beta(0.5, 0.5, sizes[k[1]]),
             "rare": rng.beta(0.1, 2.0, sizes[k[1]])}[v] for k, v in kind.items()}
    kinds = {**{m: "member" for m in MEMBERS}, BASELINE: "baseline", "base model": "base"}
    out = []
    for _ in range(seeds):
        tables: dict = {a: {} for a in arms}
        for b, n in sizes.items():
            ids = [f"{b}/{i:04d}" for i in range(n)]
            for a in arms:
                tables[a][b] = dict(zip(ids, (rng.binomial(samples, p[a, b]) / samples).tolist()))
            if tie is not None:
                tables[tie][b] = dict(tables[BASELINE][b])
        raw = {"results": {a: {b: {"score": float(np.mean(list(v.values())))} for b, v in by.items()}
                           for a, by in tables.items()},
               "targets": {a: {"kind": kinds[a]} for a in arms}}
        r = Results.from_dict(raw)
        r._tables = tables
        out.append(r)
    return out


def _line_of(text: str, label: str, cells: list[str]) -> list[str]:
    """The lines of the report's table that print ``label`` and then exactly these non-blank ``cells``."""
    pattern = re.compile(r"^\s*" + re.escape(label) + "".join(r"\s+" + re.escape(c) for c in cells if c) + r"\s*$")
    return [line for line in text.splitlines() if pattern.match(line)]


def _agg_numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(NUMBER, cell)]


@settings(max_examples=40, deadline=None)
@given(evaluations())
def test_the_report_its_json_and_the_compare_page_print_the_same_numbers_within_their_scales(seeds):
    v = verdict.build(seeds[0])
    again = json.loads(json.dumps(v))  # what `populora report --json` writes, read back
    text = verdict.text(again)
    assert text == verdict.text(v)  # the JSON holds every number the table prints
    frame = verdict_frame(again)
    scored = {r["name"] for r in v["rows"] if r["name"] in BENCHMARKS}
    shown = [r for r in again["rows"] if r["name"] in scored or r["name"] in printed_averages(scored)]
    assert list(frame.index) == [r["label"] for r in shown]  # the report's rows: no average of one benchmark, none twice
    for r in shown:
        ui = ["" if c == "–" else c for c in frame.loc[r["label"]].tolist()]
        assert ui == verdict.cells(r), r["label"]
        assert len(_line_of(text, r["label"], ui)) == 1, (r["label"], ui, text)
        for arm in verdict.ARMS:
            if r.get(arm) is not None:
                assert 0.0 <= r[arm] <= 1.0 and 0.0 <= float(frame.loc[r["label"]].iloc[verdict.ARMS.index(arm)]) <= 100.0
        for d in ("mean - baseline", "weakest - baseline"):
            c = r.get(d)
            if not c:
                continue
            lo, hi = c["ci95"]
            assert -1.0 <= lo <= c["delta"] <= hi <= 1.0 and hi - lo > 0, (r["label"], d, c)  # never zero width
            assert 0.0 <= c["p_value"] <= 1.0
            if "p_adjusted" in c:
                assert c["p_value"] - 1e-12 <= c["p_adjusted"] <= 1.0
            printed = DELTA.fullmatch(frame.loc[r["label"], d])
            dp, lp, hp = (float(x) for x in printed.groups())
            assert -100.0 <= lp <= dp <= hp <= 100.0, printed.group(0)
    agg = again["aggregates"]
    table = aggregates_frame(agg)
    for line in agg["words"]:  # the report's words and the page's table: the same IQM and P(> baseline)
        name = line.split(": IQM ")[0]
        said = [float(x) for x in re.findall(r"\d+\.\d+", line.split(": IQM ", 1)[1].replace(f"P({name} > ", ""))]
        shown = _agg_numbers(table.loc[name, "IQM (%)"]) + (_agg_numbers(table.loc[name, "P(> baseline)"])
                                                           if name in agg["probability_of_improvement"] else [])
        assert said == shown, (line, table.loc[name].tolist())
        iqm, lo, hi = shown[:3]
        assert 0.0 <= lo <= iqm <= hi <= 100.0 and agg["iqm"][name]["ci95"][1] > agg["iqm"][name]["ci95"][0], line
        if len(shown) == 6:
            p, plo, phi = shown[3:]
            assert 0.0 <= plo <= p <= phi <= 1.0, line


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 5).flatmap(evaluations))
def test_a_sweeps_report_its_json_and_the_compare_page_print_the_same_scores_within_the_scale(seeds):
    """2-5 seeds per arm (a sweep's "run" configuration and its baseline): the sweep report's text, its JSON and the
    Compare page's sweep table print the same score cells; every interval contains its estimate, has positive
    width and lies within 0-100; every comparison's p lies in [0, 1] and its interval contains its difference."""
    report = sweep_report.build(calibration_worlds.sweep_configs(seeds), with_aggregates=False)
    again = json.loads(json.dumps(report))
    text = sweep_report.text(again)
    assert text == sweep_report.text(report)
    rows = config_rows(again)
    lines = text.splitlines()
    heads = sweep_report.column_heads(again)
    assert all(h in lines[0] for k, h in heads.items() if k in sweep_report.TEXT_COLUMNS)  # the text's heads
    for r in again["configs"]:
        for arm in sweep_report.printed_arms(r):
            shown = next(x for x in rows if (x["config"], x["arm"]) == (r["label"], arm))
            assert shown["seeds"] == len(seeds)
            for k, e in r[arm].items():
                lo, hi = e["ci95"]
                assert 0.0 <= lo <= e["mean"] <= hi <= 1.0 and hi - lo > 0, (r["label"], arm, k, e)
                assert shown[heads[k]] == sweep_report.score_cell(e)
            printed = [sweep_report.score_cell(r[arm].get(k)) for k in sweep_report.TEXT_COLUMNS]
            assert sum(all(c in line for c in printed if c) and line.split()[:1] == [r["label"]]
                       and f" {arm} " in f" {line} " for line in lines) == 1, (r["label"], arm, printed)
    assert [(x["config"], x["arm"]) for x in rows] == [(r["label"], a) for r in again["configs"]
                                                       for a in sweep_report.printed_arms(r)]
    assert again["comparisons"]  # the run's population mean and weakest member against the baseline
    for c in again["comparisons"]:
        lo, hi = c["ci95"]
        assert 0.0 <= c["p_value"] <= 1.0 and -1.0 <= lo <= c["delta"] <= hi <= 1.0 and hi - lo > 0, c


@settings(max_examples=100, deadline=None)
@given(st.sets(st.sampled_from(list(BENCHMARKS)), max_size=len(BENCHMARKS)), st.integers(1, 6), st.data())
def test_the_compare_pages_score_table_has_no_empty_column_and_no_average_of_one_benchmark(scored, members, data):
    """The Compare page's benchmark table (``headline`` then ``scored_only``) over any subset of benchmarks scored,
    1-6 members, scores anywhere in [0, 1] (all 0, all 1, ties): a column per benchmark some row scored, no empty
    column, no average over a single benchmark, no two averages over the same benchmarks (the report's rule)."""
    score = st.one_of(st.just(0.0), st.just(1.0), st.floats(0, 1))
    frame = pd.DataFrame([{f"eval/{b}/score": data.draw(score) for b in sorted(scored)} for _ in range(members)],
                         index=[f"S{i}" for i in range(members)], dtype=float)
    table = scored_only(headline(frame))
    labels = {BENCHMARKS[b].label: b for b in BENCHMARKS}
    assert {labels[c] for c in table.columns if c in labels} == scored
    assert not table.isna().all().any(), table
    spans = {"code avg": {"humaneval_plus", "mbpp_plus", "livecodebench"}, "overall": set(BENCHMARKS)}
    spans["math avg"] = set(BENCHMARKS) - spans["code avg"]
    averages = [c for c in table.columns if c not in labels]
    covered = [frozenset(spans[a] & scored) for a in averages]
    assert all(len(c) >= 2 for c in covered) and len(set(covered)) == len(covered), (scored, averages)
