"""The printed report (``report.text``) over its input space: any subset of the ten benchmarks, 1 to 6 members, with or
without a baseline and the base model, scores anywhere in [0, 1] (all 0, all 1, ties), 1 to 2,000 problems. It
prints one table of the benchmarks scored and of the averages that are facts of their own, no empty row or column,
no line twice, every score as the results hold it, and no line past the width but the table's rows."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.evaluation import report
from populora.evaluation.harness import benchmarks
from populora.evaluation.statistics import headline

NAMES = list(benchmarks.BENCHMARKS)
SETS = {"code avg": set(benchmarks.GROUPS["code"]), "math avg": set(benchmarks.GROUPS["math"]), "overall": set(NAMES),
        "math avg (AZR)": set(benchmarks.AZR_MATH)}


@st.composite
def evaluations(draw):
    scored = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=10, unique=True))
    kinds = {f"S{i}": "member" for i in range(draw(st.integers(1, 6)))}
    if draw(st.booleans()):
        kinds["baseline (B0)"] = "baseline"
    if draw(st.booleans()):
        kinds["base model"] = "base"
    n = draw(st.integers(1, 2000))
    score = st.sampled_from([0.0, 1.0, 0.5]) | st.integers(0, n).map(lambda k: k / n)
    results = {t: {b: {"score": draw(score), "n": n} for b in scored} for t in kinds}
    limit = draw(st.none() | st.just(n))
    return {"results": results, "targets": {t: {"kind": k} for t, k in kinds.items()}, "config": {"limit": limit}}


def _table(lines: list[str]) -> list[str]:
    start = next(i for i, x in enumerate(lines) if x.startswith("scores in %"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip() or lines[i].startswith("weakest")), len(lines))
    return lines[start:end]


@settings(max_examples=150, deadline=None)
@given(evaluations())
def test_the_report_prints_each_fact_once_in_one_table_of_what_was_scored(data):
    t = report.build(data)
    out = report.text(t, title="population run p vs baseline run b")
    lines = out.splitlines()
    table = _table(lines)
    # rows: the benchmarks scored in the registry's order, then averages over >= 2 of them, no two over the same set
    labels = [x.split("  ")[0] for x in table[1:] if not x.startswith("tokens/adapter")]
    scored = [b for b in NAMES if b in next(iter(data["results"].values()))]
    assert labels[:len(scored)] == [benchmarks.BENCHMARKS[b].label for b in scored]
    seen = [{b} for b in scored]
    for label in labels[len(scored):]:
        name = next(a for a in report.ALL_AVERAGES if label.startswith(a.split(" (")[0]) and
                    (a != "math avg" or "AZR" not in label))
        if name != "total (AZR)":
            over = SETS[name] & set(scored)
            assert len(over) >= 2 and over not in seen, (label, over)
            seen.append(over)
    # columns: every one holds a figure in some row (none empty); every score cell is the results' own
    head, rows = report.grid(t)
    for j in range(1, len(head)):
        assert any(r[j] not in ("-", "") for r in rows), head[j]
    members = [m for m, k in data["targets"].items() if k["kind"] == "member"]
    for r in rows[:len(scored)]:
        b = scored[[benchmarks.BENCHMARKS[x].label for x in scored].index(r[0])]
        for j, who in enumerate(head[1:], 1):
            if who in data["results"]:
                assert r[j] == f"{100 * data['results'][who][b]['score']:.1f}"
            if who == "mean" and len(members) > 1:
                truth = 100 * np.mean([data["results"][m][b]["score"] for m in members])
                assert abs(float(r[j]) - truth) <= 0.05 + 1e-9  # printed to 0.1
    # no line twice; only the table's rows may run past the width (a table row is never wrapped)
    text_lines = [x for x in lines if x.strip()]
    assert len(text_lines) == len(set(text_lines))
    assert all(len(x) <= report.WIDTH for x in lines if x not in table)


def _comparison(delta: float, half: float, p: float) -> dict:
    return {"delta": delta, "ci95": [delta - half, delta + half], "p_value": p}


@settings(max_examples=200, deadline=None)
@given(st.floats(-1, 1), st.floats(0.0001, 1), st.floats(0, 1), st.integers(1, 2000), st.integers(1, 5),
       st.none() | st.floats(0.001, 1))
def test_the_verdict_sentence_says_what_the_primary_comparison_says(delta, half, p, n, seeds, mde_overall):
    rows = [{"name": "gsm8k", "mean - baseline": _comparison(delta, half, p)},
            {"name": "overall", "mean - baseline": _comparison(delta, half, p)}]
    headline.adjust(rows)
    needs = {} if mde_overall is not None else {"overall": f"needs >= {n + 1} problems per benchmark (one seed: ...)"}
    v = {"rows": rows, "n": {"gsm8k": n}, "seeds": seeds, "mde": {"overall": mde_overall, "needs": needs}}
    words = headline.plain(v)
    assert words.endswith(".") and "\n" not in words
    primary = rows[1]["mean - baseline"]
    if primary["significant"]:
        assert ("higher" if delta > 0 else "lower") in words.split(";")[0]
        assert f"{100 * delta:+.1f} pts [{100 * (delta - half):+.1f}, {100 * (delta + half):+.1f}]" in words
        assert words.startswith("these adapters: ") == (seeds == 1)
    elif mde_overall is None:
        assert words.startswith(f"no difference this data can detect: {n} problems per benchmark")
        assert f">= {n + 1} problems per benchmark would" in words
    else:
        assert words.startswith("no difference detected overall") and f">= {100 * mde_overall:.1f} pts" in words


def test_no_verdict_is_said_plainly():
    assert headline.plain(None).startswith("no verdict: no per-problem scores")
    assert headline.plain({"rows": [{"name": "gsm8k"}], "n": {"gsm8k": 3}}) == "no verdict: no baseline scored on the same problems."
