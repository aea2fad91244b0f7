"""The comparison table: does the population mean, and its weakest member, beat the single-agent baseline?

Rows: each member, population mean, weakest member, best member, baseline, base model. Mean, weakest and best
are over the final population (members alive at the end of training); members that evolution replaced are
listed as "(retired)". Columns: the ten
benchmarks (each its primary score: pass@1 on the plus tests for HumanEval+/MBPP+, pass@1 on the public tests for
LiveCodeBench, accuracy for math), code average, math average, overall (the unweighted mean of the benchmarks
scored). Pure functions of the results dict (``results.build``'s layout), so ``populora report`` needs no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from populora.evaluation import benchmarks

AVERAGES = ("code avg", "math avg", "overall")


@dataclass
class Table:
    header: list[str]
    rows: list[list]               # [label, v1, ..., v10, code avg, math avg, overall]; None = not scored
    deltas: list[str]              # the two call-outs: population mean vs baseline, weakest vs baseline


def _avg(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return float(np.mean(xs)) if xs else None


def averages(scores: dict[str, float]) -> dict[str, float | None]:
    """Code average, math average and overall (the unweighted mean of the benchmarks scored) of one adapter's
    primary scores, {benchmark name: score}; None where nothing of that group was scored.

    >>> averages({"humaneval_plus": 0.5, "mbpp_plus": 0.3, "gsm8k": 0.2})
    {'code avg': 0.4, 'math avg': 0.2, 'overall': 0.3333333333333333}
    """
    groups = (benchmarks.GROUPS["code"], benchmarks.GROUPS["math"], list(benchmarks.BENCHMARKS))
    return {name: _avg([scores.get(n) for n in names]) for name, names in zip(AVERAGES, groups)}


def population_mean(per: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean of each key over the members that have it: {member: {key: value}} -> {key: mean}.

    >>> population_mean({"T0": {"gsm8k": 0.5, "aime24": 0.1}, "S0": {"gsm8k": 0.25}})
    {'gsm8k': 0.375, 'aime24': 0.1}
    """
    keys = list(dict.fromkeys(k for scores in per.values() for k in scores))
    mean = {k: _avg([scores.get(k) for scores in per.values()]) for k in keys}
    return {k: v for k, v in mean.items() if v is not None}


def weakest_best(rank: dict[str, float | None]) -> tuple[str, str] | None:
    """(weakest, best) member by ``rank`` (the overall score); members without one are left out.

    >>> weakest_best({"T0": 0.4, "S0": 0.2, "S1": None})
    ('S0', 'T0')
    >>> weakest_best({"S1": None}) is None
    True
    """
    ranked = sorted((m for m, v in rank.items() if v is not None), key=rank.get)
    return (ranked[0], ranked[-1]) if ranked else None


def row(label: str, scores: dict[str, float]) -> list:
    cells = [scores.get(n) for n in benchmarks.BENCHMARKS]
    return [label] + cells + list(averages(scores).values())


def build(results: dict) -> Table:
    """``results``: {"results": {label: {benchmark: {"score": x, ...}}}, "targets": {label: {"kind": ...}}}."""
    per = {label: {b: r["score"] for b, r in by.items()} for label, by in results["results"].items()}
    kinds = {label: results["targets"].get(label, {}).get("kind", "member") for label in per}
    header = ["adapter"] + [benchmarks.BENCHMARKS[n].label for n in benchmarks.BENCHMARKS] + list(AVERAGES)
    scored = [label for label in per if kinds[label] == "member"]
    retired = {m for m in scored if str(results["targets"].get(m, {}).get("alive", "true")).lower() == "false"}
    # the summary rows describe the final population (the paper's comparison); members replaced by evolution
    # keep their own rows, marked, and count only when no member of the final population was scored
    members = [m for m in scored if m not in retired] or scored
    rows = [row(f"{m} (retired)" if m in retired else m, per[m]) for m in scored]
    named: dict[str, list] = {}
    if len(members) > 1:
        named["population mean"] = row("population mean", population_mean({m: per[m] for m in members}))
        ends = weakest_best({m: averages(per[m])["overall"] for m in members})
        if ends:
            named["weakest"] = row(f"weakest member ({ends[0]})", per[ends[0]])
            named["best"] = row(f"best member ({ends[1]})", per[ends[1]])
        rows += list(named.values())
    baselines = [row(label, per[label]) for label in per if kinds[label] == "baseline"]
    rows += baselines + [row(label, per[label]) for label in per if kinds[label] == "base"]
    if len(members) == 1:  # a one-member population is its own mean and weakest member
        only = row(members[0], per[members[0]])
        named = {"population mean": only, "weakest": only}
    return Table(header, rows, call_outs(named, baselines[0] if baselines else None))


def call_outs(named: dict[str, list], baseline: list | None) -> list[str]:
    if baseline is None:
        return ["no baseline scored: train one (configs/baseline.yaml) and pass --baseline RUN_ID "
                "(or tag the run populora.baseline_run)"]
    out = []
    for key, what in (("population mean", "population mean"), ("weakest", "weakest member")):
        r = named.get(key)
        if r is None:
            continue
        parts = [f"{name} {_points(r[-3 + i], baseline[-3 + i])}" for i, name in enumerate(AVERAGES)]
        out.append(f"{what} vs baseline: " + ", ".join(parts))
    return out


def _points(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{100 * (a - b):+.1f} pts"


def _fmt(v) -> str:
    return "" if v is None else (f"{100 * v:.1f}" if isinstance(v, float) else str(v))


def markdown(t: Table) -> str:
    lines = ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    lines += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in t.rows]
    return "\n".join(lines) + "\n\nScores in % (pass@1; HumanEval+/MBPP+ on base + extra tests). " \
        "LiveCodeBench (public tests) uses only the public tests, so it is more lenient than official LiveCodeBench.\n\n" \
        + "\n".join(f"- {d}" for d in t.deltas) + "\n"


def text(t: Table) -> str:
    """A fixed-width table for the terminal (short column names; the Markdown file has the full ones)."""
    short = {"LiveCodeBench (public tests)": "LCB(pub)", "OlympiadBench": "Olymp", "Minerva Math": "Minerva"}
    header = [short.get(h, h) for h in t.header]
    width = max(len(str(r[0])) for r in t.rows + [t.header])
    lines = [f"{header[0]:<{width}} " + " ".join(f"{h:>9}" for h in header[1:])]
    lines += [f"{str(r[0]):<{width}} " + " ".join(f"{_fmt(v):>9}" for v in r[1:]) for r in t.rows]
    return "\n".join(lines) + "\n" + "\n".join(t.deltas) + "\n"


def csv_text(t: Table) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(t.header)
    w.writerows([["" if v is None else v for v in r] for r in t.rows])
    return buf.getvalue()
