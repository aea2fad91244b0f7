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

import textwrap
from dataclasses import dataclass, field

import numpy as np

from populora.evaluation.harness import benchmarks
from populora.evaluation.statistics import families, headline, power, selection, stats
from populora.evaluation import compute as compute_figure
from populora.evaluation.summary import BASE, BASELINE, MEMBER, Results, Summary, population_summary

AVERAGES = ("code avg", "math avg", "overall")  # ours: the keys of ``averages`` (the UI's Compare page too)
AZR_AVERAGES = ("math avg (AZR)", "total (AZR)")
ALL_AVERAGES = AVERAGES + AZR_AVERAGES
AZR_MATH = benchmarks.AZR_MATH  # AZR's math avg: no GSM8K
COLUMNS = {"code avg": "code avg (= AZR)", "math avg": "math avg (7 incl. GSM8K)", "overall": "overall (mean of 10)",
           "math avg (AZR)": "math avg (AZR: 6 no GSM8K)", "total (AZR)": "total (AZR)"}  # the table's headers
WIDTH = 116  # the printed report's lines (a table row is never wrapped)
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
METHODS = (
    "Differences are paired over problems, their 95% interval by MOVER (Zou & Donner 2008) over the parts of the "
    "per-problem difference (Newcombe 1998's paired construction; never zero width: Bowyer, Aitchison & Ivanova "
    "2025), p by inverting it (16 problems or fewer: the larger of it and the exact sign-flip p); p-values "
    "Holm-adjusted (Holm 1979) over every comparison but overall mean - baseline, the primary.")
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
    scope: str = ""                # what was scored: "GSM8K, 2 problems" (report.text's first line)


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
                  notes + protocol_notes(r) + sampling_notes(r) + subset_notes(r) + quality_notes(r), scope=scope(r))
    table.deltas += compute_call_out(table)
    return table


def protocol_notes(results: Results) -> list[str]:
    """Which evaluation protocol, budgets and EvalPlus limits the scores were made under."""
    proto = results.config.get("protocol")
    if not isinstance(proto, dict):
        return ["protocol: not recorded (results made before protocols; regrade or re-run to compare)"]
    scored = {b for by in results.scores.values() for b in by}
    budgets = {b: v for b, v in proto.get("budgets", {}).items() if b in scored or not scored}
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


def _ns(results: Results) -> dict[str, list[int]]:
    """Problems scored per benchmark, {benchmark: the distinct n of its targets}, in the canonical order."""
    ns: dict[str, list] = {}
    for by in results.scores.values():
        for b, sc in by.items():
            if sc.n is not None and sc.n not in ns.setdefault(b, []):
                ns[b].append(sc.n)
    return {b: ns[b] for b in benchmarks.BENCHMARKS if ns.get(b)}


def scope(results: Results) -> str:
    """What was scored, in a line: the benchmarks and their problems ("GSM8K, 2 problems"; "2 benchmarks
    (problems: MBPP+ 378, GSM8K 500)"), and a ``--limit``'s caveat."""
    ns, scored = _ns(results), {b for by in results.scores.values() for b in by}
    labels = [(benchmarks.BENCHMARKS[b].label, " / ".join(map(str, ns.get(b, [])))) for b in benchmarks.BENCHMARKS if b in scored]
    cells = [f"{b} {n}".strip() for b, n in labels]
    what = (f"{labels[0][0]}, {labels[0][1]} problems" if len(labels) == 1 and labels[0][1] else
            f"{len(labels)} benchmark{'s' if len(labels) > 1 else ''} ({'problems: ' if ns else ''}{', '.join(cells)})"
            if labels else "nothing scored")
    limit = results.config.get("limit")
    return what + (f" (--limit {limit}: the first {limit} of each benchmark, not comparable with full-benchmark "
                   "scores)" if limit else "")


def subset_notes(results: Results) -> list[str]:
    """Benchmarks whose targets were scored on different numbers of problems (not comparable). ``scope`` says the
    ``--limit`` and the problems."""
    return [f"n per benchmark differs between targets (not comparable): {benchmarks.BENCHMARKS[b].label} "
            f"{' / '.join(map(str, n))}" for b, n in _ns(results).items() if len(n) > 1]


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
    """The table as a results file keeps it (results.md, report.md): a row per adapter, a column per benchmark
    scored and per average worth printing, tokens per adapter; the scope, the notes and the definitions below."""
    header, rows = with_compute(t)
    keep = [0, *_scored_columns(t), len(header) - 1]
    lines = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    lines += ["| " + " | ".join(_fmt(r[i]) for i in keep) + " |" for r in rows]
    return f"Scored: {t.scope}.\n\n" + "\n".join(lines) + "\n\nScores in % (pass@1; HumanEval+/MBPP+ on base + extra " \
        f"tests). {LCB_LABEL}: problems of 2024-08..2025-01, graded on their public tests only, so it is more lenient " \
        "than official LiveCodeBench (AZR's is release_v5, 880 problems, with hidden tests).\n\n" + DEFINITIONS + "\n\n" \
        + "\n".join(f"- {d}" for d in t.notes + t.deltas) + "\n"


def _scored_columns(t: Table) -> list[int]:
    """Indexes (into a row) of the benchmarks some row scored, then of the averages worth printing
    (``printed_averages``)."""
    names = list(benchmarks.BENCHMARKS)
    scored = {n for i, n in enumerate(names) if any(r[1 + i] is not None for r in t.rows)}
    kept = printed_averages(scored)
    return ([1 + i for i, n in enumerate(names) if n in scored]
            + [1 + len(names) + k for k, a in enumerate(ALL_AVERAGES) if a in kept])


def printed_averages(scored: set[str]) -> list[str]:
    """The averages (of ``ALL_AVERAGES``, in its order) that are a fact of their own when the benchmarks ``scored``
    (registry names) were scored: an average over at least two of them, not over the same ones as an average
    printed before it (with GSM8K alone, "math avg" and "overall" are GSM8K again); AZR's total whenever code and
    AZR's math are both scored (it weighs the two halves equally, which "overall" does not). The report and the
    Compare page print these.

    >>> printed_averages({"gsm8k", "math500"}), printed_averages({"gsm8k"})
    (['math avg'], [])
    >>> printed_averages({"humaneval_plus", "math500"})
    ['overall', 'total (AZR)']
    """
    names = list(benchmarks.BENCHMARKS)
    over = {"code avg": set(benchmarks.GROUPS["code"]), "math avg": set(benchmarks.GROUPS["math"]),
            "overall": set(names), "math avg (AZR)": set(AZR_MATH)}
    kept, seen = [], []
    for a in ALL_AVERAGES:
        if a == "total (AZR)":
            keep = bool(scored & over["code avg"]) and bool(scored & over["math avg (AZR)"])
        else:
            its = over[a] & scored
            keep = len(its) >= 2 and its not in seen
            seen.append(its)
        if keep:
            kept.append(a)
    return kept


def _column_label(label: str) -> str:
    """A row label as a column head: a member's id; the summary rows by what they are (their picks in a note)."""
    for head in ("population mean", "weakest member", "best member"):
        if label.startswith(head):
            return {"population mean": "mean", "weakest member": "weakest", "best member": "best"}[head]
    return "baseline" if label.startswith("baseline") else "base" if label == "base model" else label


def picks_note(t: Table) -> str | None:
    """Which members the weakest / best columns are ("weakest member (S0); best member (T1)")."""
    labels = [r[0] for r in t.rows if r[0].startswith(("weakest member", "best member"))]
    if not labels:
        return None
    return "; ".join(labels).replace(", cross-fit)", ")").replace(f", {selection.BIASED})", ")")


def grid(t: Table, judged: dict | None = None) -> tuple[list[str], list[list[str]]]:
    """The report's one table, benchmarks down and adapters across: a row per benchmark scored and per average
    worth printing, a column per member (<= 4; more are in report.csv), the population mean, weakest, best,
    baseline and base model, then the verdict's paired differences with their 95% intervals; tokens per adapter
    last. No empty row or column."""
    cols = _scored_columns(t)
    members = [r for r in t.rows if _column_label(r[0]) == r[0]]
    shown = [r for r in t.rows if r not in members or len(members) <= 4]
    head = ["scores in %"] + [_column_label(r[0]) for r in shown]
    deltas = [d for d, _ in families.DELTAS] if judged else []
    by_name = {x["name"]: x for x in (judged or {}).get("rows", [])}
    deltas = [d for d in deltas if any(d in x for x in by_name.values())]
    head += [f"{d} [95%]" for d in deltas]
    names = list(benchmarks.BENCHMARKS) + list(ALL_AVERAGES)
    scored = [names[c - 1] for c in cols if names[c - 1] in benchmarks.BENCHMARKS]
    out = []
    for c in cols:
        name = names[c - 1]
        label = benchmarks.BENCHMARKS[name].label if name in benchmarks.BENCHMARKS else scored_label(name, COLUMNS[name], scored)
        cells = [_fmt(r[c]) or "-" for r in shown]
        x = by_name.get(name, {})
        cells += [_delta(x.get(d)) for d in deltas]
        out.append([label] + cells)
    compute = dict(zip([r[0] for r in t.rows], t.compute or []))
    if any(compute.get(r[0]) for r in shown):
        out.append(["tokens/adapter"] + [f"{compute[r[0]]:,.0f}" if compute.get(r[0]) else "-" for r in shown]
                   + [""] * len(deltas))
    return head, out


def _delta(c: dict | None) -> str:
    return "-" if not c else f"{100 * c['delta']:+.1f} [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"


def text(t: Table, judged: dict | None = None, compute: dict | None = None, title: str = "",
         verdict: bool = False) -> str:
    """The report as a reader reads it: what was compared (``title``) on which problems, one table, the verdict in
    a sentence (``verdict``: a verdict was asked for; ``judged`` None then means no per-problem scores), the
    compute in a line, then the notes and the methods as numbered footnotes, wrapped. Every fact once; the JSON
    has them all."""
    head, rows = grid(t, judged)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    out = [f"{title}: {t.scope}" if title else t.scope, ""] + [line(head)] + [line(r) for r in rows]
    foot: list[str] = []

    def cite(note: str) -> str:
        foot.append(note)
        return f"[{len(foot)}]"

    pick = picks_note(t)
    if pick:
        out.append(f"{pick}: {'cross-fit' if CROSS_FIT in t.notes else 'chosen on the same problems, biased'} "
                   + cite(CROSS_FIT if CROSS_FIT in t.notes else BIASED))
    if verdict and judged:
        refs = [cite(METHODS)] + ([cite(headline.ONE_SEED + ".")] if judged.get("seeds", 1) == 1 else []) \
            + ([cite("smallest difference this design detects: " + power.detail(judged["mde"]))] if judged.get("mde") else [])
        out += ["", f"verdict: {headline.plain(judged)} {''.join(refs)}"]
        if judged.get("aggregates") and len(judged.get("n", {})) >= 3:
            out.append("aggregates over the benchmarks: " + "; ".join(judged["aggregates"]["words"]) + " "
                       + cite("rliable (Agarwal et al. 2021): 95% intervals over problems by the Bayesian bootstrap "
                              "(Rubin 1981), with a pseudo-problem at each end of the scale."))
    elif verdict:
        out += ["", "verdict: " + (t.deltas[0] if t.deltas and t.deltas[0].startswith("no baseline") else
                                   "none here: the per-problem scores (the evaluation's samples files) are not on this machine")]
    if compute:
        out.append(f"compute: {compute['words']} {cite(compute['detail'])}")
    notes = [n for n in t.notes if n not in (CROSS_FIT, BIASED)]
    if sum(1 for r in t.rows if _column_label(r[0]) == r[0]) > 4:
        notes.append("each member's own scores: report.csv")
    wrap = lambda text, first, rest: textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                                                        break_on_hyphens=False)  # noqa: E731
    out = [wrap(x, "", "    ") if len(x) > WIDTH and "  " not in x.strip() else x for x in out]
    if notes:
        out += ["", "notes:"] + [wrap(n, "- ", "  ") for n in notes]
    if foot:
        out += [""] + [wrap(f, f"[{i}] ", "    ") for i, f in enumerate(foot, 1)]
    return "\n".join(out) + "\n"


def csv_text(t: Table) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    header, rows = with_compute(t)
    w.writerow(header)
    w.writerows([["" if v is None else v for v in r] for r in rows])
    return buf.getvalue()
