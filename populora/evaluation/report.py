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


def row(label: str, scores: dict[str, float]) -> list:
    names = list(benchmarks.BENCHMARKS)
    cells = [scores.get(n) for n in names]
    code = _avg([scores.get(n) for n in benchmarks.GROUPS["code"]])
    math = _avg([scores.get(n) for n in benchmarks.GROUPS["math"]])
    return [label] + cells + [code, math, _avg(cells)]


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
        overall = {m: row(m, per[m])[-1] for m in members}
        ranked = sorted((m for m in members if overall[m] is not None), key=overall.get)
        mean = {n: _avg([per[m].get(n) for m in members]) for n in benchmarks.BENCHMARKS}
        named["population mean"] = row("population mean", {k: v for k, v in mean.items() if v is not None})
        if ranked:
            named["weakest"] = row(f"weakest member ({ranked[0]})", per[ranked[0]])
            named["best"] = row(f"best member ({ranked[-1]})", per[ranked[-1]])
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
