"""The comparison table: does the population mean, and its weakest member, beat the single-agent baseline?

Rows: each member, population mean, weakest member, best member, baseline, base model. Mean, weakest and best
are over the final population (members alive at the end of training); members that evolution replaced are
listed as "(retired)". Columns: the ten
benchmarks (each its primary score: pass@1 on the plus tests for HumanEval+/MBPP+, pass@1 on the public tests for
LiveCodeBench, accuracy for math), code average, math average, overall (the unweighted mean of the benchmarks
scored). Beside each row: the compute it cost, per adapter (tokens generated + trained over the whole run, from
the training run's compute ledger; the population mean is the run's total over its adapters), so a reader sees
whether the comparison with the baseline is compute-matched. Pure functions of the results dict
(``results.build``'s layout), so ``populora report`` needs no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from populora.evaluation import benchmarks

AVERAGES = ("code avg", "math avg", "overall")
COMPUTE = "tokens/adapter"  # generated + trained tokens per adapter over the training run (compute ledger)


@dataclass
class Table:
    header: list[str]
    rows: list[list]               # [label, v1, ..., v10, code avg, math avg, overall]; None = not scored
    deltas: list[str]              # the call-outs: population mean vs baseline, weakest vs baseline, compute
    compute: list[float | None] | None = None  # per row: tokens/adapter (None = not measured, e.g. the base model)


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
    compute = [row_compute(r[0], results["targets"], members) for r in rows]
    table = Table(header, rows, call_outs(named, baselines[0] if baselines else None), compute)
    table.deltas += compute_call_out(table)
    return table


def _tokens(info: dict) -> float | None:
    value = info.get("compute_tokens")
    return None if value in (None, "") else float(value)


def row_compute(label: str, targets: dict, members: list[str]) -> float | None:
    """Tokens per adapter of a row: a member's own; the population's total over its adapters (the run's
    ``compute/per_adapter/*``, else the members' mean); the weakest / best member's own."""
    if label in targets:
        return _tokens(targets[label])
    if label.endswith(" (retired)"):
        return _tokens(targets.get(label[:-len(" (retired)")], {}))
    if label == "population mean":
        run = [targets[m].get("run_compute_tokens_per_adapter") for m in members]
        run = [float(v) for v in run if v not in (None, "")]
        return run[0] if run else _avg([_tokens(targets[m]) for m in members])
    if label.endswith(")") and "(" in label:  # weakest member (S0), best member (T1)
        return _tokens(targets.get(label[label.rindex("(") + 1:-1], {}))
    return None


def compute_call_out(t: Table) -> list[str]:
    by_label = {r[0]: c for r, c in zip(t.rows, t.compute or [])}
    pop = by_label.get("population mean")
    base = next((c for label, c in by_label.items() if label.startswith("baseline")), None)
    if pop is None or base is None or base == 0:
        return []
    return [f"compute per adapter: population {pop:,.0f} vs baseline {base:,.0f} tokens (ratio {pop / base:.2f})"]


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


def with_compute(t: Table) -> tuple[list[str], list[list]]:
    """Header and rows with the compute column appended (the benchmark columns keep their positions)."""
    compute = t.compute or [None] * len(t.rows)
    return t.header + [COMPUTE], [r + [None if c is None else int(round(c))] for r, c in zip(t.rows, compute)]


def markdown(t: Table) -> str:
    header, rows = with_compute(t)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n\nScores in % (pass@1; HumanEval+/MBPP+ on base + extra tests). " \
        "LiveCodeBench (public tests) uses only the public tests, so it is more lenient than official LiveCodeBench.\n\n" \
        + "\n".join(f"- {d}" for d in t.deltas) + "\n"


def text(t: Table) -> str:
    """A fixed-width table for the terminal (short column names; the Markdown file has the full ones)."""
    short = {"LiveCodeBench (public tests)": "LCB(pub)", "OlympiadBench": "Olymp", "Minerva Math": "Minerva", COMPUTE: "tok/adptr"}
    full_header, rows = with_compute(t)
    header = [short.get(h, h) for h in full_header]
    width = max(len(str(r[0])) for r in rows + [full_header])
    lines = [f"{header[0]:<{width}} " + " ".join(f"{h:>9}" for h in header[1:])]
    lines += [f"{str(r[0]):<{width}} " + " ".join(f"{_fmt(v):>9}" for v in r[1:]) for r in rows]
    return "\n".join(lines) + "\n" + "\n".join(t.deltas) + "\n"


def csv_text(t: Table) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    header, rows = with_compute(t)
    w.writerow(header)
    w.writerows([["" if v is None else v for v in r] for r in rows])
    return buf.getvalue()
