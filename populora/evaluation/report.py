"""The member-vs-baseline table: rows = members, population mean / weakest / best, baseline, base model;
columns = benchmarks, code / math averages, overall. Deltas of the mean and of the weakest vs the baseline."""

from __future__ import annotations

import numpy as np

from populora.evaluation import benchmarks


def table(scores: dict[str, dict], kinds: dict[str, str]) -> tuple[list[str], list[list]]:
    names = [n for n in benchmarks.BENCHMARKS if any(n in s for s in scores.values())]
    header = ["adapter"] + [benchmarks.BENCHMARKS[n].label for n in names] + ["code avg", "math avg", "overall"]

    def row(label, values: dict[str, float]) -> list:
        code = [values[n] for n in names if n in values and benchmarks.BENCHMARKS[n].group == "code"]
        math = [values[n] for n in names if n in values and benchmarks.BENCHMARKS[n].group == "math"]
        avg = lambda xs: float(np.mean(xs)) if xs else None
        return [label] + [values.get(n) for n in names] + [avg(code), avg(math), avg(code + math)]

    acc = {label: {n: s["accuracy"] for n, s in per.items()} for label, per in scores.items()}
    members = [label for label in acc if kinds.get(label) == "member"]
    rows = [row(m, acc[m]) for m in members]
    if members:
        overall = {m: row(m, acc[m])[-1] for m in members}
        weakest, best = min(members, key=overall.get), max(members, key=overall.get)
        mean = {n: float(np.mean([acc[m][n] for m in members if n in acc[m]])) for n in names}
        rows += [row("population mean", mean), row(f"weakest ({weakest})", acc[weakest]), row(f"best ({best})", acc[best])]
    rows += [row(label, acc[label]) for label in acc if kinds.get(label) in ("baseline", "base")]
    return header, rows


def markdown(header: list[str], rows: list[list]) -> str:
    fmt = lambda v: "" if v is None else (f"{100 * v:.1f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def deltas(header: list[str], rows: list[list]) -> list[str]:
    """The two comparisons the paper makes: population mean vs baseline and weakest member vs baseline."""
    by = {str(r[0]).split(" (")[0]: r for r in rows}
    base = next((r for r in rows if "@baseline" in str(r[0])), None)
    if base is None or "population mean" not in by or base[-1] is None:
        return ["(no baseline scores: train one with configs/baseline.yaml and pass --baseline RUN_ID)"]
    out = []
    for key in ("population mean", "weakest"):
        r = by[key]
        out.append(f"{r[0]} vs baseline, overall: {100 * (r[-1] - base[-1]):+.1f} points")
    return out


def csv_text(header: list[str], rows: list[list]) -> str:
    return "\n".join(",".join("" if v is None else str(v) for v in r) for r in [header] + rows) + "\n"
