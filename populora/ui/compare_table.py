"""The Compare page's tables, as pure functions of metric frames (rows = member ids, columns = metric keys).

The population summary (mean, weakest and best member) and the code / math / overall averages come from the
evaluation report, so the page shows the numbers ``populora report`` prints.
"""

from __future__ import annotations

import math

import pandas as pd

from populora.evaluation import (AVERAGES, BENCHMARKS, VERDICT_COLUMNS, Results, Summary, averages,
                                 population_summary, printed_averages, report_pick_label, report_summary, verdict_cells)

VERDICT_LABELS = {"weakest": "weakest member", "best": "best member"}  # the Compare table's heads of VERDICT_COLUMNS


def _values(row: pd.Series) -> dict[str, float]:
    """A frame row as {key: float}, without the empty cells."""
    numbers = pd.to_numeric(row, errors="coerce")
    return {k: float(v) for k, v in numbers.items() if not math.isnan(v)}


def end_labels(summary: Summary) -> dict[str, str]:
    """{"weakest" | "best": row label} of a summary ranked by a rating (display only): the member, and the members
    tied with it (``Summary.ties``: equal at the ``places`` decimals the tables show).

    >>> end_labels(population_summary({m: {} for m in ("T1", "T3", "S0", "S3")}, exclude={"S3"}, places=3,
    ...                               rank={"T1": 23.0691, "T3": 23.0694, "S0": 20.0, "S3": 19.0}))
    {'weakest': 'weakest member (S0)', 'best': 'best member (T3; tied: T1)'}
    """
    return {w: f"{w} member ({summary.picks[w][0]}" + (f"; tied: {', '.join(summary.ties[w])})" if summary.ties[w] else ")")
            for w in summary.picks}


def summarize(scores: pd.DataFrame, members: list[str], baseline: pd.Series | None, base: pd.Series | None,
              rank: pd.Series | None = None, unplayed: set[str] = frozenset(),
              picked: dict[str, pd.Series] | None = None, deltas: bool = True) -> pd.DataFrame:
    """Rows: each member, the population mean, the weakest and best member by ``rank`` (e.g. a rating; left out
    without one; ties named, members in ``unplayed`` left out, see ``end_labels``) or the two rows of ``picked``
    ({label: row}, weakest first: the evaluation report's cross-fitted picks, see ``report_ends``), the baseline,
    the base model, and (``deltas``) the mean and weakest member minus the baseline.

    >>> s = pd.DataFrame({"x": [0.2, 0.4]}, index=["T0", "S0"])
    >>> t = summarize(s, ["T0", "S0"], pd.Series({"x": 0.25}), None, rank=s["x"])
    >>> list(t.index)
    ['T0', 'S0', 'population mean', 'weakest member (T0)', 'best member (S0)', 'baseline', 'mean - baseline', 'weakest - baseline']
    >>> t.loc[["mean - baseline", "weakest - baseline"], "x"].round(3).tolist()
    [0.05, -0.05]
    """
    pop = scores.loc[[m for m in members if m in scores.index]]
    per = {m: _values(pop.loc[m]) for m in pop.index}
    rows = {m: pop.loc[m] for m in pop.index}
    weakest = None
    if per:
        ranks = {m: _values(rank).get(m) for m in per} if rank is not None else {}
        summary = population_summary(per, rank=ranks, exclude=unplayed, places=3)
        rows["population mean"] = pd.Series(summary.mean, dtype=float)
        if picked:
            weakest = next(iter(picked))
            rows.update(picked)
        else:
            labels = end_labels(summary)
            weakest = labels.get("weakest")
            rows.update({labels[w]: pop.loc[summary.picks[w][0]] for w in labels})
    if baseline is not None:
        rows["baseline"] = baseline
    if base is not None:
        rows["base model"] = base
    table = pd.DataFrame(rows).T.apply(pd.to_numeric, errors="coerce")
    if baseline is not None and per and deltas:
        table.loc["mean - baseline"] = table.loc["population mean"] - table.loc["baseline"]
        if weakest:
            table.loc["weakest - baseline"] = table.loc[weakest] - table.loc["baseline"]
    return table


def headline(scores: pd.DataFrame | pd.Series | None) -> pd.DataFrame | pd.Series | None:
    """Each benchmark's main score (``eval/<benchmark>/score``) under its table label, in %, plus the report's
    code average, math average and overall.

    >>> headline(pd.Series({"eval/gsm8k/score": 0.5, "eval/gsm8k/accuracy": 0.5, "eval/mbpp_plus/score": 0.25}))["overall"]
    np.float64(37.5)
    """
    if scores is None:
        return None
    frame = scores.to_frame().T if isinstance(scores, pd.Series) else scores
    names = [n for n in BENCHMARKS if f"eval/{n}/score" in frame.columns]
    main = frame[[f"eval/{n}/score" for n in names]].apply(pd.to_numeric, errors="coerce")
    main.columns = names
    avgs = pd.DataFrame([averages(_values(r)) for _, r in main.iterrows()], index=main.index, columns=list(AVERAGES))
    out = pd.concat([main.rename(columns={n: BENCHMARKS[n].label for n in names}), avgs.astype(float)], axis=1) * 100
    return out.iloc[0] if isinstance(scores, pd.Series) else out


def scored_only(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (a ``headline`` frame, or ``summarize``'s of them) with the columns ``populora report`` prints: the
    benchmarks some row scored, and the averages that are a fact of their own (``printed_averages``: none over a
    single benchmark, none that repeats an average before it).

    >>> t = pd.DataFrame({"GSM8K": [50.0], "MATH-500": [None], "code avg": [None], "math avg": [50.0], "overall": [50.0]})
    >>> list(scored_only(t).columns)
    ['GSM8K']
    """
    by_label = {BENCHMARKS[n].label: n for n in BENCHMARKS}
    scored = {by_label[c] for c in table.columns if c in by_label and table[c].notna().any()}
    kept = set(printed_averages(scored))
    return table[[c for c in table.columns if (by_label.get(c) in scored) or c in kept]]


def report_ends(data: dict, members: list[str]) -> tuple[dict[str, pd.Series], bool]:
    """The weakest and best member rows of ``members`` exactly as ``populora report`` picks and labels them from a
    results.json (``report_summary``): cross-fitted on held-out halves of the problems when the samples files are
    on disk (a member picked as weakest on one half is scored on the other, so the pick's luck does not lower its
    score), else the biased pick on the same problems, labelled so. Rows hold ``eval/<benchmark>/score``;
    ({}, False) with fewer than two scored members.
    """
    results = Results.from_dict(data)
    members = [m for m in members if m in results.scores]
    if len(members) < 2:
        return {}, False
    summary = report_summary(results, members)
    return {report_pick_label(summary, w): pd.Series({f"eval/{b}/score": v for b, v in summary.scores[w].items()},
                                                     dtype=float) for w in summary.picks}, summary.cross_fitted


def verdict_frame(v: dict) -> pd.DataFrame:
    """The verdict (``build_verdict``) as the Compare page's table: rows = benchmarks then averages, columns = the
    arms' scores in % and each difference with the baseline as "+d [lo, hi]" points (paired 95%, the report's
    intervals), each cell as ``populora report`` prints it (``verdict_cells``), "–" where its table has a blank;
    the rows the report prints (the benchmarks, and the averages of ``printed_averages``).

    >>> row = {"name": "gsm8k", "label": "GSM8K", "population mean": 0.75, "baseline": 1.0,
    ...        "mean - baseline": {"delta": -0.25, "ci95": [-0.25, -0.25]}}
    >>> verdict_frame({"rows": [row]}).loc["GSM8K"].tolist()
    ['75.0', '–', '–', '100.0', '–', '-25.0 [-25.0, -25.0]', '–']
    """
    scored = {r["name"] for r in v["rows"] if r["name"] in BENCHMARKS}
    kept = scored | set(printed_averages(scored))  # the report's rows: no average over one benchmark or repeated
    rows = {r["label"]: verdict_cells(r, empty="–") for r in v["rows"] if r["name"] in kept}
    return pd.DataFrame.from_dict(rows, orient="index", columns=[VERDICT_LABELS.get(c, c) for c in VERDICT_COLUMNS])


def aggregates_frame(agg: dict) -> pd.DataFrame:
    """rliable's aggregates as a table: IQM and P(config > baseline), each with its 95% interval (in %).

    >>> agg = {"iqm": {"a": {"value": 0.5, "ci95": [0.4, 0.6], "runs": 3}},
    ...        "probability_of_improvement": {"a": {"value": 0.75, "ci95": [0.5, 0.9]}}}
    >>> aggregates_frame(agg).loc["a"].tolist()
    ['50.0 [40.0, 60.0]', '0.75 [0.50, 0.90]', '3']
    """
    def cell(e, scale, fmt):
        if not e:
            return "–"
        ci = e.get("ci95")
        return f"{scale * e['value']:{fmt}}" + ("" if ci is None else f" [{scale * ci[0]:{fmt}}, {scale * ci[1]:{fmt}}]")
    rows = {k: [cell(e, 100, ".1f"), cell(agg["probability_of_improvement"].get(k), 1, ".2f"), str(e["runs"])]
            for k, e in agg["iqm"].items()}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["IQM (%)", "P(> baseline)", "runs"])
