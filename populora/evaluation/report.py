"""The comparison table: does the population mean, and its weakest member, beat the single-agent baseline?

Rows: each member, population mean, weakest member, best member, baseline, base model. Mean, weakest and best
are over the final population (members alive at the end of training); members that evolution replaced are
listed as "(retired)". The weakest / best member is cross-fitted (``selection.py``): it is chosen on one half of
each benchmark's problems and scored on the other half, from the per-problem verdicts in the samples files, so
choosing it does not bias its score. Without samples files (old results) it is chosen on the same problems and
its label says "biased".

Columns: the ten benchmarks (each its primary score: pass@1 on the plus tests for HumanEval+/MBPP+, pass@1 on
the public tests for LiveCodeBench, accuracy for math), then the averages under both definitions: ours (code
avg; math avg over the 7 math benchmarks including GSM8K; overall, the unweighted mean of the 10) and AZR's
(code avg is the same; math avg over AIME24/25, AMC23, MATH-500, Minerva and OlympiadBench, without GSM8K;
total = (code avg + math avg) / 2). Beside each row: the compute it cost, per adapter (tokens generated +
trained over the whole run, from the training run's compute ledger; the population mean is the run's total
over its adapters), so a reader sees whether the comparison with the baseline is compute-matched. Below the
table: ``--limit`` when the run used it and n per benchmark. Pure functions of the results dict
(``results.build``'s layout) and its samples files, so ``populora report`` needs no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from populora.evaluation.harness import benchmarks
from populora.evaluation.statistics import selection, stats
from populora.evaluation import compute as compute_figure
from populora.evaluation.summary import BASE, BASELINE, MEMBER, Results, Summary, population_summary

AVERAGES = ("code avg", "math avg", "overall")  # ours: the keys of ``averages`` (the UI's Compare page too)
AZR_AVERAGES = ("math avg (AZR)", "total (AZR)")
ALL_AVERAGES = AVERAGES + AZR_AVERAGES
AZR_MATH = ("aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench")  # AZR's math avg: no GSM8K
COLUMNS = {"code avg": "code avg (= AZR)", "math avg": "math avg (7 incl. GSM8K)", "overall": "overall (mean of 10)",
           "math avg (AZR)": "math avg (AZR: 6 no GSM8K)", "total (AZR)": "total (AZR)"}  # the table's headers
COMPUTE = "tokens/adapter"  # generated + trained tokens per adapter over the training run (compute ledger)
LCB_LABEL = benchmarks.BENCHMARKS["livecodebench"].label
SHORT = {LCB_LABEL: "LCB(pub)", "OlympiadBench": "Olymp", "Minerva Math": "Minerva", COMPUTE: "tok/adptr",
         COLUMNS["code avg"]: "code", COLUMNS["math avg"]: "math7", COLUMNS["overall"]: "overall10",
         COLUMNS["math avg (AZR)"]: "math6 AZR", COLUMNS["total (AZR)"]: "total AZR"}  # the terminal's headers
DEFINITIONS = (
    "Averages, ours: code avg (= AZR) = HumanEval+, MBPP+, LiveCodeBench (AZR's code avg is the same); math avg "
    "(7 incl. GSM8K) = the seven math benchmarks; overall (mean of 10) = the unweighted mean of all benchmarks. "
    "AZR's: math avg (AZR: 6 no GSM8K) = AIME24, AIME25, AMC23, MATH-500, Minerva Math, OlympiadBench; total (AZR) = "
    "(code avg + math avg (AZR)) / 2. Each average is over the benchmarks of its definition that were scored.")
CROSS_FIT = (
    "Weakest / best member: cross-fit. Each benchmark's problems are split into halves A and B (sorted ids, "
    "alternating); the member with the lowest (highest) overall score on half A is scored on half B and the one "
    "chosen on half B on half A, so the choice does not bias the score (chosen and scored on the same problems, "
    "8 equally skilled members on 500 problems read about 3 points low / high).")
BIASED = (
    "Weakest / best member: no per-problem verdicts to cross-fit with (samples files not found, members "
    "evaluated on different problems, or no benchmark with two problems), so the member was selected on the same "
    "problems it is scored on: biased low (weakest) / high (best).")


@dataclass
class Table:
    header: list[str]
    rows: list[list]               # [label, v1, ..., v10, *ALL_AVERAGES]; None = not scored
    deltas: list[str]              # the call-outs: population mean vs baseline, weakest vs baseline, compute
    compute: list[float | None] | None = None  # per row: tokens/adapter (None = not measured, e.g. the base model)
    notes: list[str] = field(default_factory=list)  # how the weakest / best was chosen, --limit, n per benchmark


def _avg(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return float(np.mean(xs)) if xs else None


def averages(scores: dict[str, float]) -> dict[str, float | None]:
    """Code average, math average (7, incl. GSM8K) and overall (the unweighted mean of the benchmarks scored) of
    one adapter's primary scores, {benchmark name: score}; None where nothing of that group was scored.

    >>> averages({"humaneval_plus": 0.5, "mbpp_plus": 0.3, "gsm8k": 0.2})
    {'code avg': 0.4, 'math avg': 0.2, 'overall': 0.3333333333333333}
    """
    groups = (benchmarks.GROUPS["code"], benchmarks.GROUPS["math"], list(benchmarks.BENCHMARKS))
    return {name: _avg([scores.get(n) for n in names]) for name, names in zip(AVERAGES, groups)}


def azr_averages(scores: dict[str, float]) -> dict[str, float | None]:
    """AZR's math avg (the six math benchmarks without GSM8K) and total ((code avg + math avg) / 2; None unless
    both are scored).

    >>> azr_averages({"humaneval_plus": 0.5, "gsm8k": 0.9, "aime24": 0.1, "math500": 0.3})
    {'math avg (AZR)': 0.2, 'total (AZR)': 0.35}
    """
    code, math = averages(scores)["code avg"], _avg([scores.get(n) for n in AZR_MATH])
    return {"math avg (AZR)": math, "total (AZR)": None if code is None or math is None else (code + math) / 2}


def row(label: str, scores: dict[str, float]) -> list:
    cells = [scores.get(n) for n in benchmarks.BENCHMARKS]
    return [label] + cells + list({**averages(scores), **azr_averages(scores)}.values())


def row_averages(r: list) -> dict[str, float | None]:
    """{average name: value} of a table row."""
    return dict(zip(ALL_AVERAGES, r[1 + len(benchmarks.BENCHMARKS):]))


def pick_label(summary: Summary, which: str) -> str:
    """The weakest / best row's label: which members, and how they were chosen (display only).

    >>> pick_label(population_summary({"T0": {"gsm8k": 0.5}, "S0": {"gsm8k": 0.25}}), "weakest")
    'weakest member (S0, selected on the same problems: biased)'
    """
    if summary.cross_fitted:
        return summary.selections[which].label()
    return f"{which} member ({summary.picks[which][0]}, {selection.BIASED})"


def summary_of(results: Results, members: list[str]) -> Summary:
    """The population summary of ``members`` as the report computes it: cross-fitted on the per-problem scores
    of the samples files on disk, else the biased pick by overall score (what the Compare page shows too)."""
    return population_summary(results.score_table(members), tables=results.tables())


def build(results: Results | dict) -> Table:
    """``results``: typed, or a results.json dict: {"results": {label: {benchmark: {"score": x, "n": n,
    "samples_file": path, ...}}}, "targets": {label: {"kind": ...}}, "config": {"limit": N, ...}}."""
    r = Results.of(results)
    per = r.score_table()
    header = ["adapter"] + [benchmarks.BENCHMARKS[n].label for n in benchmarks.BENCHMARKS] + [COLUMNS[a] for a in ALL_AVERAGES]
    scored = r.of_kind(MEMBER)
    retired = {m for m in scored if not r.targets[m].alive}
    # the summary rows describe the final population (the paper's comparison); members replaced by evolution
    # keep their own rows, marked, and count only when no member of the final population was scored
    members = r.final_members(scored)
    rows = [row(f"{m} (retired)" if m in retired else m, per[m]) for m in scored]
    compute = [adapter_tokens(r, [m]) for m in scored]  # per row, from the ids it is made of (never its label)
    named: dict[str, list] = {}
    notes = []
    if len(members) > 1:
        summary = summary_of(r, members)
        named["population mean"] = row("population mean", summary.mean)
        for which in summary.picks:
            named[which] = row(pick_label(summary, which), summary.scores[which])
        notes += [CROSS_FIT if summary.cross_fitted else BIASED] if summary.picks else []
        rows += list(named.values())
        compute += [adapter_tokens(r, members, population=True)] + [adapter_tokens(r, summary.picks[w]) for w in summary.picks]
    others = r.of_kind(BASELINE) + r.of_kind(BASE)
    baselines = [row(label, per[label]) for label in r.of_kind(BASELINE)]
    rows += [row(label, per[label]) for label in others]
    compute += [adapter_tokens(r, [t]) for t in others]
    if len(members) == 1:  # a one-member population is its own mean and weakest member
        only = row(members[0], per[members[0]])
        named = {"population mean": only, "weakest": only}
    table = Table(header, rows, call_outs(named, baselines[0] if baselines else None), compute,
                  notes + protocol_notes(r) + sampling_notes(r) + subset_notes(r) + quality_notes(r))
    table.deltas += compute_call_out(table)
    return table


def protocol_notes(results: Results) -> list[str]:
    """Which evaluation protocol, budgets and EvalPlus limits the scores were made under."""
    proto = results.config.get("protocol")
    if not isinstance(proto, dict):
        return ["protocol: not recorded (results made before protocols; regrade or re-run to compare)"]
    budgets = proto.get("budgets", {})
    by_value: dict[int, list[str]] = {}
    for b, v in budgets.items():
        by_value.setdefault(v, []).append(benchmarks.BENCHMARKS[b].label if b in benchmarks.BENCHMARKS else b)
    text = "; ".join(f"{v:,} new tokens: {', '.join(names)}" for v, names in sorted(by_value.items()))
    changed = f" (changed: {', '.join(proto['overridden'])})" if proto.get("overridden") else ""
    return [f"protocol {proto.get('name')}{changed}: {text}; math template {proto.get('math_template')}; EvalPlus "
            f"time limits {proto.get('evalplus_min_time_limit')} s / {proto.get('evalplus_time_factor')}x"]


def sampling_notes(results: Results) -> list[str]:
    """Sampled evaluation: the decoding, and per benchmark what N samples per problem bought over one (the standard
    error of pass@1 over problems, the mean over targets; ``stats.one_sample_stderr``)."""
    proto = results.config.get("protocol")
    if not isinstance(proto, dict) or proto.get("samples", 1) <= 1:
        return []
    cells = []
    for b in benchmarks.BENCHMARKS:
        pairs = [(s.entry.get(f"{s.entry.get('primary')}_stderr"), s.entry.get("stderr_one_sample"))
                 for by in results.scores.values() for name, s in by.items() if name == b]
        pairs = [(a, c) for a, c in pairs if isinstance(a, (int, float)) and isinstance(c, (int, float))]
        if pairs:
            se, one = (float(np.mean(v)) for v in zip(*pairs))
            cells.append(f"{benchmarks.BENCHMARKS[b].label} {stats.shrinkage_words(se, one, proto['samples'])}")
    return [f"decoding: {proto.get('decoding')}; the problem stays the unit of every interval; what the samples "
            f"bought over one sample (or greedy at the same accuracy), mean over targets: " + ("; ".join(cells) or "-")]


def quality_notes(results: Results) -> list[str]:
    """Pairs whose completions ran out of budget, and math verdicts that were not math-verify's: both move scores."""
    cut, fell = [], []
    for label, by in results.scores.items():
        for b, entry in ((b, s.entry) for b, s in by.items()):
            name = benchmarks.BENCHMARKS[b].label if b in benchmarks.BENCHMARKS else b
            if entry.get("truncated_rate"):
                cut.append(f"{label} {name} {100 * entry['truncated_rate']:.0f}%")
            if entry.get("grading_fallback"):
                fell.append(f"{label} {name} {100 * entry['grading_fallback']:.0f}%")
    out = []
    if cut:
        out.append("completions cut by the token budget (raise budgets.<benchmark>): " + ", ".join(cut))
    if fell:
        out.append("math verdicts by exact text match, timeout or error instead of math-verify: " + ", ".join(fell))
    return out


def subset_notes(results: Results) -> list[str]:
    """The ``--limit`` of the run (if any) and n per benchmark (flagged where targets differ)."""
    limit = results.config.get("limit")
    out = [f"--limit {limit}: first {limit} items of each benchmark: not comparable with full-benchmark scores"] if limit else []
    ns: dict[str, list] = {}
    for by in results.scores.values():
        for b, s in by.items():
            if s.n is not None and s.n not in ns.setdefault(b, []):
                ns[b].append(s.n)
    cells = [f"{benchmarks.BENCHMARKS[b].label} {' / '.join(map(str, ns[b]))}"
             + (" (differs between targets: not comparable)" if len(ns[b]) > 1 else "")
             for b in benchmarks.BENCHMARKS if ns.get(b)]
    return out + (["n per benchmark: " + ", ".join(cells)] if cells else [])


def _tokens(info: dict) -> float | None:
    value = info.get("compute_tokens")
    return None if value in (None, "") else float(value)


def adapter_tokens(results: Results, ids: list[str], population: bool = False) -> float | None:
    """Tokens per adapter of a row made of the targets ``ids``: a member's own (the mean of the two members a
    cross-fitted row is made of); the population's (``population``): the run's total over its adapters (the
    run's ``compute/per_adapter/*``), else its members' mean."""
    infos = [results.targets[t].info if t in results.targets else {} for t in ids]
    if population:
        run = [float(i["run_compute_tokens_per_adapter"]) for i in infos
               if i.get("run_compute_tokens_per_adapter") not in (None, "")]
        if run:
            return run[0]
    return _avg([_tokens(i) for i in infos])


def compute_call_out(t: Table) -> list[str]:
    by_label = {r[0]: c for r, c in zip(t.rows, t.compute or [])}
    pop = by_label.get("population mean")
    base = next((c for label, c in by_label.items() if label.startswith("baseline")), None)
    if not pop or base is None:  # no population tokens to compare with (None or 0)
        return []
    # the one compute figure (evaluation/compute.py): "compute-matched" only within its tolerance
    return [f"compute per adapter: {compute_figure.words(pop, base)}"]


def call_outs(named: dict[str, list], baseline: list | None) -> list[str]:
    """Population mean and weakest member minus the baseline, in points: our averages, then AZR's."""
    if baseline is None:
        return ["no baseline scored: train one (configs/baseline.yaml) and pass --baseline RUN_ID "
                "(or tag the run populora.baseline_run)"]
    out = []
    for key, what in (("population mean", "population mean"), ("weakest", "weakest member")):
        r = named.get(key)
        if r is None:
            continue
        mine, base = row_averages(r), row_averages(baseline)
        ours = [f"{scored_label(a, COLUMNS[a], _scored(r, baseline))} {_points(mine[a], base[a])}" for a in AVERAGES]
        azr = [f"math avg (6) {_points(mine['math avg (AZR)'], base['math avg (AZR)'])}",
               f"total {_points(mine['total (AZR)'], base['total (AZR)'])}"]
        out.append(f"{what} vs baseline: " + ", ".join(ours) + "; AZR's definitions: " + ", ".join(azr))
    return out


def scored_label(average: str, label: str, scored) -> str:
    """An average's ``label``, with how many benchmarks it is over where fewer than the whole suite were
    ``scored`` (benchmark names): "overall (mean of 2)" after ``--benchmarks gsm8k,humaneval_plus``, not "(mean of
    10)" (the call-outs here, the sweep report's heads).

    >>> scored_label("overall", "overall (mean of 10)", ["gsm8k", "humaneval_plus"])
    'overall (mean of 2)'
    >>> scored_label("math avg", "m", ["gsm8k", "humaneval_plus"]), scored_label("math avg (AZR)", "a", ["gsm8k"])
    ('math avg (1 of 7 incl. GSM8K)', 'math avg (AZR: 0 of 6)')
    >>> scored_label("code avg", "code avg (= AZR)", ["gsm8k"]), scored_label("overall", "o", benchmarks.BENCHMARKS)
    ('code avg (= AZR)', 'o')
    """
    scored = set(scored)
    if not scored or len(scored) == len(benchmarks.BENCHMARKS):
        return label
    math = scored & set(benchmarks.GROUPS["math"])
    return {"overall": f"overall (mean of {len(scored)})", "math avg": f"math avg ({len(math)} of 7 incl. GSM8K)",
            "math avg (AZR)": f"math avg (AZR: {len(math & set(AZR_MATH))} of 6)"}.get(average, label)


def _scored(*rows: list) -> list[str]:
    """The benchmarks every table row has a score for."""
    return [n for i, n in enumerate(benchmarks.BENCHMARKS) if all(r[1 + i] is not None for r in rows)]


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
        f"{LCB_LABEL}: problems of 2024-08..2025-01, graded on their public tests only, so it is more lenient than " \
        "official LiveCodeBench (AZR's is release_v5, 880 problems, with hidden tests).\n\n" + DEFINITIONS + "\n\n" \
        + "\n".join(f"- {d}" for d in t.notes + t.deltas) + "\n"


def text(t: Table) -> str:
    """A fixed-width table for the terminal (short column names, explained below it; the Markdown file has the
    full ones)."""
    full_header, rows = with_compute(t)
    header = [SHORT.get(h, h) for h in full_header]
    width = max(len(str(r[0])) for r in rows + [full_header])
    lines = [f"{header[0]:<{width}} " + " ".join(f"{h:>9}" for h in header[1:])]
    lines += [f"{str(r[0]):<{width}} " + " ".join(f"{_fmt(v):>9}" for v in r[1:]) for r in rows]
    legend = "columns: " + ", ".join(f"{SHORT[h]} = {h}" for h in full_header if h in SHORT and h != COMPUTE)
    return "\n".join(lines + [legend] + t.notes + t.deltas) + "\n"


def csv_text(t: Table) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    header, rows = with_compute(t)
    w.writerow(header)
    w.writerows([["" if v is None else v for v in r] for r in rows])
    return buf.getvalue()
