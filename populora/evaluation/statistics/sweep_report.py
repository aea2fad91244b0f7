"""Statistics of evaluated runs: per-configuration means with 95% intervals over seeds and problems, and paired
comparisons with the baseline (``populora report --sweep ID``, ``populora report --run ID --json``).

Per-problem scores (per_problem.py) come from the samples files ``populora eval`` writes next to results.json (one line per
generation, with its verdict), so every arm is compared problem by problem. Arms of one run: "population mean"
(the per-problem mean over the final population's members), "weakest" and "best" member (by their overall score,
as in ``report.py``, cross-fitted: chosen on one half of each benchmark's problems and scored on the other, see
``selection.py``), and "baseline" (a baseline run's one member, or a population run's linked baseline).

Arms are compared only over the same problems: runs evaluated on different problem sets (a ``--limit`` run
beside a full one) are refused with an error naming the benchmarks and their n, never silently intersected.
"""

from __future__ import annotations

import numpy as np

from populora.evaluation.statistics import aggregates, families, headline, power, selection, stats
from populora.evaluation.harness import benchmarks
from populora.evaluation import compute
from populora.evaluation import report as report_table
from populora.evaluation.results import load as load_results
from populora.evaluation.summary import BASELINE, ENDS, MEMBER, Results, population_summary
from populora.platform import config as config_io
from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S

ARMS = ("population mean", "weakest", "best")
TEXT_COLUMNS = {"code avg": "code avg", "math avg": "math avg (7 incl. GSM8K)", "overall": "overall (mean of 10)",
                "math avg (AZR)": "math avg (AZR: 6)", "total (AZR)": "total (AZR)"}
DEFINITIONS = ("Averages: ours are unweighted means of the benchmarks scored (code avg: HumanEval+, MBPP+, "
               "LiveCodeBench, the same as AZR's; math avg: the 7 math benchmarks incl. GSM8K; overall: all); AZR's "
               "math avg leaves out GSM8K and its total is (code avg + math avg) / 2. The comparisons with the "
               "baseline are on overall (ours).")
SELECTION_NOTE = ("weakest / best: the member the cross-fit rule picks (per seed, the member chosen on one half of each "
                  "benchmark's problems is scored on the other half, so the choice does not bias the score; where no "
                  "benchmark has two problems, the member is chosen on the problems it is scored on: biased). Its "
                  "interval covers the rule's pick, not the truly weakest / best member: over seeds the pick is "
                  "redone in every run, so the seed variance includes the pick's")
INTERVALS = ("Intervals: one seed per arm, over problems (these adapters on these problems, not the method): a score, "
             "Wilson's interval at the effective sample size (Wilson 1927; Korn & Graubard 1998); a difference, "
             "MOVER (Zou & Donner 2008) over the parts of the per-problem difference, Newcombe's (1998) paired "
             "construction, its p inverting it (16 problems or fewer: the larger of it and the exact sign-flip p); "
             ">= 2 seeds, a claim about the method: differences, a seed-level t on the per-seed differences (S-1 "
             "degrees of freedom, the variance floored at ties; identical arms: MOVER over the pooled cells); "
             "scores, Wilson at the effective sample size of the seeds x problems variance (Satterthwaite's "
             "degrees of freedom with the seed term at its upper 75% bound, Korn & Graubard's correction). None has zero width on finite data (Bowyer, "
             "Aitchison & Ivanova 2025: no CLT on few problems). p-values Holm-adjusted (families.py): the "
             "configurations' overall population mean vs baseline among themselves (the primary), every other "
             "comparison of a configuration with the baseline in that configuration's family (weakest member overall "
             "included), comparisons between configurations in a family of their own.")


class ReportError(ValueError):
    """Nothing to report (unknown sweep, runs not evaluated); the message says what to run."""


def run_arms(results: Results | dict) -> dict[str, dict[str, dict[str, float]]]:
    """{arm: {benchmark: {problem: score}}} of one evaluation's results (arms without data are left out)."""
    r = Results.of(results)
    per_target = r.tables()
    alive = r.final_members([t for t in per_target if per_target[t]])
    arms: dict[str, dict[str, dict[str, float]]] = {}
    if alive:
        tables = {m: per_target[m] for m in alive}
        try:
            problems = selection.common_problems(tables)
        except ValueError as err:
            raise ReportError(str(err)) from err
        arms["population mean"] = {b: {p: float(np.mean([tables[m][b][p] for m in alive])) for p in ps}
                                   for b, ps in problems.items()}
        per = {m: {b: float(np.mean([tables[m][b][p] for p in ps])) for b, ps in problems.items()} for m in alive}
        summary = population_summary(per, rank={m: selection.overall(tables[m], problems) for m in alive},
                                     tables=tables)
        for which in ENDS:  # cross-fitted unless no benchmark has two problems (then biased)
            if summary.cross_fitted:
                arms[which] = summary.selections[which].scores
            else:  # the biased pick, scored on the problems that chose it (none without a benchmark in common)
                m = summary.picks[which][0] if summary.picks else None
                arms[which] = {b: {p: tables[m][b][p] for p in ps} for b, ps in problems.items()} if m else {}
    baselines = [t for t in r.of_kind(BASELINE) if per_target.get(t)]
    if baselines:
        arms["baseline"] = per_target[baselines[0]]
    return arms


SCORED = "scored with"  # a seed's arms may carry {"samples", "members"} of its evaluation under this key (``scored_arms``)


def scoring(results: Results | dict) -> dict[str, int]:
    """{"samples": per problem (its config's generation: ``n_samples`` at a temperature; 1: greedy), "members":
    averaged in the population mean (the final population's, ``power.MEMBERS`` where none)} of one evaluation."""
    r = Results.of(results)
    gen = (r.config or {}).get("generation") or {}
    samples = int(gen.get("n_samples") or 1) if (gen.get("temperature") or 0) > 0 else 1
    tables = r.tables()
    members = len(r.final_members([t for t in r.of_kind(MEMBER) if tables.get(t)]))
    return {"samples": samples, "members": members or power.MEMBERS}


def scored_arms(results: Results | dict) -> dict:
    """``run_arms`` and, under ``SCORED``, how they were scored (``scoring``): a sweep's seed as ``gather`` reads
    it, so that its MDE is priced at the samples and members scored, as the run's own report prices it."""
    return {**run_arms(results), SCORED: scoring(results)}


def scored_design(pop: list[dict], base: list[dict] | None, problems: dict[str, list[str]],
                  scored: dict | None = None, family: int = 20, primary: int = 1) -> tuple[power.Design, dict, dict]:
    """(the design of what was scored, its MDE as printed, how its seed effect was set: ``power.from_scored``'s):
    the one builder of the report's, the sweep report's and Compare's MDE. ``pop`` and ``base``: per seed the
    population mean's and the baseline's {benchmark: {problem: score}} (seed i of one with seed i of the other;
    ``base`` None: no baseline scored), on ``problems``; ``scored``: {"samples", "members"} of the evaluation
    (``scoring``; default greedy, ``power.MEMBERS``); the Holm families' sizes. From the data: the scores (a Beta
    at the two arms' mean), the per-problem noise of the difference (``power.measured_noise``) and, with >= 2
    seeds, the baseline's per-seed scores and the per-seed overall differences."""
    scored = {"samples": 1, "members": power.MEMBERS, **(scored or {})}
    order = [b for b in problems if problems[b]]
    a = strata(pop, order, problems)                                     # (seeds, problems) per benchmark
    b = strata(base, order, problems) if base is not None else None
    scores = {n: float((x.mean() + (x if b is None else b[i]).mean()) / 2) for i, (n, x) in enumerate(zip(order, a))}
    data = {} if b is None else {
        "per_seed": {n: [float(v) for v in y.mean(axis=1)] for n, y in zip(order, b)},
        "per_seed_diff": [float(v) for v in np.mean([x.mean(axis=1) - y.mean(axis=1) for x, y in zip(a, b)], axis=0)],
        "noise": power.measured_noise({n: x - y for n, x, y in zip(order, a, b)})}
    design, how = power.from_scored(scores, {n: len(problems[n]) for n in order}, len(pop), samples=scored["samples"],
                                    members=scored["members"], family=family, primary=primary, **data)
    mde = power.mde(design)
    mde["sigma_source"] = how["source"]
    mde["words"] = power.words(mde)
    return design, mde, how


def _scored_of(population: dict[int, dict], baseline: dict[int, dict]) -> dict:
    """How a configuration and the baseline were scored (``SCORED`` of each seed's arms): the population's
    members (the fewest of its seeds), the fewest samples per problem of either side (the noisier one)."""
    pop = [arms[SCORED] for arms in population.values() if SCORED in arms]
    both = pop + [arms[SCORED] for arms in baseline.values() if SCORED in arms]
    out = {}
    if pop:
        out["members"] = min(x.get("members", power.MEMBERS) for x in pop)
    if both:
        out["samples"] = min(x.get("samples", 1) for x in both)
    return out


# ====================================================================== arrays: (seeds, problems) per benchmark
def strata(by_seed: list[dict[str, dict[str, float]]], names: list[str], problems: dict[str, list[str]]) -> list[np.ndarray]:
    """One (seeds, problems) array per benchmark in ``names``, problems in the shared order ``problems[b]``."""
    return [np.array([[seed_arm[b][p] for p in problems[b]] for seed_arm in by_seed]) for b in names]


def same_problems(arms: dict[str, dict[str, dict[str, float]]]) -> dict[str, list[str]]:
    """{benchmark: sorted problems} of arms that were all evaluated on the same problems, in the canonical order.
    ``arms``: {name (e.g. "baseline seed 0"): {benchmark: {problem: score}}}. Arms that differ (a benchmark
    missing from some, or a benchmark with other problems: a ``--limit`` run beside a full one) are refused
    with a ReportError naming the benchmarks and each arm's n, rather than compared on an intersection."""
    names = {b for a in arms.values() for b in a}
    diffs = []
    for b in [b for b in benchmarks.BENCHMARKS if b in names]:
        sets = {name: frozenset(a.get(b, ())) for name, a in arms.items()}
        if len(set(sets.values())) > 1:
            sizes = ", ".join(f"{name} n={len(s)}" if s else f"{name} not evaluated" for name, s in sets.items())
            diffs.append(f"{b} ({sizes})" if len({len(s) for s in sets.values()}) > 1
                         else f"{b} (same n, different problems: {sizes})")
    if diffs:
        raise ReportError("refusing to compare arms evaluated on different problem sets: " + "; ".join(diffs)
                          + ". Evaluate them with the same --benchmarks and --limit")
    first = next(iter(arms.values()), {})
    return {b: sorted(first[b]) for b in benchmarks.BENCHMARKS if b in first}


_groups = families.groups  # the rows of a verdict, one definition (families.py)


# ====================================================================== the report of a sweep
def config_overrides(label: str) -> dict:
    """The overrides a config label stands for ("baseline": the single-agent switch)."""
    if label == S.BASELINE_LABEL:
        return {"population.single_agent": True}
    if label == "default" or any("=" not in part for part in label.split(" ")):
        return {}  # not a grid label (a single run's "run")
    return {".".join(k): v for k, v in (config_io.parse_override(part) for part in label.split(" "))}


def build(configs: dict[str, dict[int, dict]], between: list[tuple[str, str]] = (), seed: int = 0,
          with_aggregates: bool = True) -> dict:
    """``configs``: {config label: {seed: arms of that seed's run}} (``run_arms``; ``sweep_seed``, as ``gather``
    reads them, adds under ``SCORED`` the samples per problem and members the MDE is priced at); the baseline config
    is labelled "baseline". Returns the report: ``configs`` rows with intervals, ``comparisons`` with the baseline (Holm-
    adjusted), ``verdicts`` per configuration (per benchmark, the headline on adjusted results, the MDE) and
    ``aggregates`` (rliable's IQM and probability of improvement over seeds x benchmarks)."""
    baseline = configs.get(S.BASELINE_LABEL, {})
    rows = [row for lab, by_seed in configs.items() for row in [config_row(lab, by_seed)] if row]
    comparisons = []
    for lab, by_seed in configs.items():
        if lab == S.BASELINE_LABEL:
            continue
        for arm, what in (("population mean", "population mean"), ("weakest", "weakest member")):
            c = _compare(f"{lab}: {what} vs baseline", (lab, by_seed, arm), (S.BASELINE_LABEL, baseline, "population mean"))
            comparisons += [c] if c else []
    for a, b in between:
        c = _compare(f"{a} vs {b}: population mean", (a, configs.get(a, {}), "population mean"),
                     (b, configs.get(b, {}), "population mean"))
        comparisons += [c] if c else []
    # the families of families.py: the primary among the configurations, each configuration's other comparisons
    # with the baseline in its verdict's family (weakest member overall: its adjusted p is the verdict's), and the
    # comparisons between configurations among themselves
    primary = [c for c in comparisons if c.name.endswith(": population mean vs baseline")]
    weakest = [c for c in comparisons if c.name.endswith(": weakest member vs baseline")]
    for family in (primary, [c for c in comparisons if c not in primary and c not in weakest]):
        for c, p in zip(family, stats.holm([c.p_value for c in family]) if family else []):
            c.p_adjusted = p
    adjusted = {c.name.split(": ")[0]: c.p_adjusted for c in primary}
    verdicts = {lab: v for lab, by_seed in configs.items() if lab != S.BASELINE_LABEL
                for v in [config_verdict(by_seed, baseline, max(len(primary), 1), adjusted.get(lab))] if v}
    for c in comparisons:
        lab = c.name.split(": ")[0]
        if c in primary and lab in verdicts:  # the primary's MDE (the weakest member's design is another)
            c.mde = verdicts[lab]["mde"]["overall"]
        if c in weakest:
            row = next((r for r in verdicts.get(lab, {}).get("rows", []) if r["name"] == "overall"), {})
            c.p_adjusted = row.get("weakest - baseline", {}).get("p_adjusted", c.p_value)
    return {"configs": rows, "comparisons": [c.to_dict() for c in comparisons], "verdicts": verdicts,
            "aggregates": aggregate(configs, seed) if with_aggregates else None}


def config_row(lab: str, by_seed: dict[int, dict]) -> dict | None:
    """One configuration's row of the report: each arm's score with its 95% interval (``stats.estimate``) per
    benchmark and average, over its seeds; None without a seed that scored the population."""
    seeds = sorted(s for s, arms in by_seed.items() if "population mean" in arms)
    if not seeds:
        return None
    row = {"config": config_overrides(lab), "label": lab, "seeds": seeds}
    problems = same_problems({f"{lab} seed {s}": by_seed[s]["population mean"] for s in seeds})
    for s in seeds:  # a run's arms share its problems by construction (the selection's halves are of them)
        same_problems({f"{lab} seed {s}: {a}": by_seed[s][a] for a in ARMS})
    for arm in ARMS:
        data = [by_seed[s][arm] for s in seeds]
        row[arm] = {g: stats.estimate(strata(data, names, problems), weights=w).to_dict()
                    for g, (names, w) in _groups(problems).items()}
    row["overall"] = row["population mean"].get("overall")
    return row


def _benchmark_matrix(by_seed: dict[int, dict], arm: str = "population mean") -> tuple[list[str], np.ndarray] | None:
    """(benchmarks, (seeds, benchmarks) scores) of one configuration's arm, over the benchmarks every seed scored."""
    seeds = sorted(s for s, arms in by_seed.items() if arm in arms)
    if not seeds:
        return None
    names = [b for b in benchmarks.BENCHMARKS if all(by_seed[s][arm].get(b) for s in seeds)]
    return names, np.array([[np.mean(list(by_seed[s][arm][b].values())) for b in names] for s in seeds])


def aggregate(configs: dict[str, dict[int, dict]], seed: int = 0) -> dict | None:
    """rliable's aggregates of every configuration's population mean over its seeds x the benchmarks all scored
    (``aggregates.summary``); P(config > baseline) against the "baseline" configuration."""
    mats = {lab: m for lab, by_seed in configs.items() for m in [_benchmark_matrix(by_seed)] if m}
    if not mats:
        return None
    common = [b for b in benchmarks.BENCHMARKS if all(b in names for names, _ in mats.values())]
    if not common:
        return None
    arms = {lab: m[:, [names.index(b) for b in common]] for lab, (names, m) in mats.items()}
    out = aggregates.summary(arms, S.BASELINE_LABEL if S.BASELINE_LABEL in arms else None, seed=seed,
                             per_problem=_per_problem(configs, list(arms), common))
    out["benchmarks"] = common
    out["words"] = aggregates.words(out, S.BASELINE_LABEL)
    return out


def _per_problem(configs: dict[str, dict[int, dict]], labels: list[str], common: list[str]) -> dict | None:
    """{config: [per benchmark in ``common``, each problem's population-mean score averaged over the seeds]}, on
    the problems every configuration shares (None when they share none: no problem-level interval)."""
    seeds = {lab: sorted(s for s, a in configs[lab].items() if "population mean" in a) for lab in labels}
    shared = {b: sorted(set.intersection(*(set(configs[lab][s]["population mean"][b]) for lab in labels
                                            for s in seeds[lab]))) for b in common}
    if not all(shared.values()):
        return None
    return {lab: [np.array([np.mean([configs[lab][s]["population mean"][b][p] for s in seeds[lab]]) for p in shared[b]])
                  for b in common] for lab in labels}


def config_verdict(by_seed: dict[int, dict], baseline: dict[int, dict], primary: int = 1,
                   primary_adjusted: float | None = None) -> dict | None:
    """One configuration against the baseline over the seeds both have: per benchmark and average, population mean
    and weakest member minus the baseline (``seed_compare`` with >= 2 seeds, else ``compare``), Holm-adjusted in
    the families of ``families.py`` (``primary``: the configurations in the primary's family, ``primary_adjusted``
    its adjusted p), the MDE of this design (``power.mde``) and the headline in words; None without common seeds."""
    seeds = sorted(s for s in by_seed if s in baseline and "population mean" in by_seed[s] and "population mean" in baseline[s])
    if not seeds:
        return None
    arms = {f"{a} seed {s}": by_seed[s][a] for s in seeds for a in ("population mean", "weakest") if a in by_seed[s]}
    problems = same_problems({**arms, **{f"baseline seed {s}": baseline[s]["population mean"] for s in seeds}})
    base = [baseline[s]["population mean"] for s in seeds]
    rows = []
    for name, (names, weights) in _groups(problems).items():
        row = {"name": name}
        for delta, arm in headline.DELTAS:
            if all(arm in by_seed[s] for s in seeds):
                a, b = strata([by_seed[s][arm] for s in seeds], names, problems), strata(base, names, problems)
                c = stats.seed_compare(delta, a, b, weights) if len(seeds) > 1 else stats.compare(delta, a, b, weights=weights)
                row[delta] = c.to_dict()
        rows.append(row)
    family = headline.adjust(rows, primary_adjusted)
    design, mde, how = scored_design([by_seed[s]["population mean"] for s in seeds], base, problems,
                                     _scored_of({s: by_seed[s] for s in seeds}, {s: baseline[s] for s in seeds}),
                                     family=family, primary=primary)
    overall = next((r["mean - baseline"]["delta"] for r in rows if r["name"] == "overall" and "mean - baseline" in r), None)
    need = power.seeds_needed(design, overall) if overall and len(seeds) == 1 else None
    return {"rows": rows, "seeds": seeds, "family": family, "mde": mde, "seed_sigma": how["measured"],
            "seeds_needed": need, "level": stats.METHOD if len(seeds) > 1 else stats.ADAPTERS,
            "words": headline.words(rows, mde, need, seeds=len(seeds))}


def _compare(name: str, left: tuple[str, dict[int, dict], str], right: tuple[str, dict[int, dict], str]):
    """``left`` - ``right``, each (config label, {seed: arms}, arm), paired over the seeds both have; None without
    common seeds. Both sides must have answered the same problems (else a ReportError names the difference)."""
    (left_label, left, left_arm), (right_label, right, right_arm) = left, right
    seeds = sorted(s for s in left if s in right and left_arm in left[s] and right_arm in right[s])
    if not seeds:
        return None
    a, b = [left[s][left_arm] for s in seeds], [right[s][right_arm] for s in seeds]
    problems = same_problems({**{f"{left_label} seed {s}": x for s, x in zip(seeds, a)},
                              **{f"{right_label} seed {s}": x for s, x in zip(seeds, b)}})
    names = [n for n in problems if problems[n]]
    if not names:
        return None
    if len(seeds) > 1:  # a claim about the method: the seed variance in the interval
        return stats.seed_compare(name, strata(a, names, problems), strata(b, names, problems))
    return stats.compare(name, strata(a, names, problems), strata(b, names, problems))


def single_run(arms: dict) -> dict:
    """A run on its own: the same intervals and paired comparisons over problems (one seed)."""
    configs = {"run": {0: arms}}
    if "baseline" in arms:
        b = arms["baseline"]
        configs[S.BASELINE_LABEL] = {0: {"population mean": b, "weakest": b, "best": b}}
    return build(configs)


# ====================================================================== text
def score_cell(e: dict | None) -> str:
    """A score with its 95% interval as the sweep report prints it, in % ("57.3 [52.4, 62.0]"); "" for none.
    The Compare page's sweep table prints the same (ui/sweeps.config_rows).

    >>> score_cell({"mean": 0.573, "ci95": [0.524, 0.62]}), score_cell(None)
    ('57.3 [52.4, 62.0]', '')
    """
    return "" if not e else f"{100 * e['mean']:.1f} [{100 * e['ci95'][0]:.1f}, {100 * e['ci95'][1]:.1f}]"


def printed_arms(row: dict) -> tuple[str, ...]:
    """The arms a configuration's row prints: all three, the baseline configuration its one adapter only (its
    weakest and best are that adapter too)."""
    return ARMS if row["label"] != S.BASELINE_LABEL else ARMS[:1]


def _heads(report: dict) -> list[str]:
    """The averages' column heads, naming how many benchmarks each average is over where fewer than all were
    scored (``report.scored_label``): "overall (mean of 4)" on a 4-benchmark sweep, not the suite's "mean of 10"."""
    return [column_heads(report)[k] for k in TEXT_COLUMNS]


def column_heads(report: dict) -> dict[str, str]:
    """{key of a row's score: its column head}: a benchmark's label ("GSM8K"), an average's head as the text
    prints it (``_heads``); the Compare page's sweep table heads its columns with these (ui/sweeps.config_rows)."""
    scored = {b for r in report["configs"] for arm in ARMS for b in r.get(arm, {}) if b in benchmarks.BENCHMARKS}
    return {**{b: benchmarks.BENCHMARKS[b].label for b in sorted(scored)},
            **{k: report_table.scored_label(k, label, scored) for k, label in TEXT_COLUMNS.items()}}


def text(report: dict) -> str:
    head = ["config", "seeds", "arm", *_heads(report)]
    lines = [[r["label"], ",".join(map(str, r["seeds"])), arm, *(score_cell(r[arm].get(k)) for k in TEXT_COLUMNS)]
             for r in report["configs"] for arm in printed_arms(r)]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(f"{str(c):<{w}}" for c, w in zip(cells, widths))  # noqa: E731
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines]
    out += ["", "Scores in % with 95% intervals.", INTERVALS, DEFINITIONS, SELECTION_NOTE]
    out += [f"- {c['words']}" for c in report["comparisons"]] or ["- no baseline evaluated: nothing to compare with"]
    out += _closing(report) + list(report.get("compute") or [])
    return "\n".join(out) + "\n"


def _closing(report: dict) -> list[str]:
    """The per-configuration verdicts (headline, MDE) and rliable's aggregates, as lines."""
    out = [f"verdict, {lab}: {v['words']}" for lab, v in (report.get("verdicts") or {}).items()]
    agg = report.get("aggregates")
    if agg:
        out += [f"rliable (Agarwal et al. 2021) over seeds x {len(agg['benchmarks'])} benchmarks, population mean; "
                "95% intervals: the hull of the stratified bootstrap over runs and the Bayesian bootstrap over "
                "problems (a pseudo-problem at each end of the scale):"] + [f"  {line}" for line in agg["words"]]
    return out


def markdown(report: dict) -> str:
    """Per benchmark too: one table per arm."""
    names = list(dict.fromkeys(k for r in report["configs"] for k in r["population mean"]))
    out = []
    for arm in ARMS:
        out += [f"### {arm}", "", "| config | seeds | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 2)]
        out += [f"| {r['label']} | {len(r['seeds'])} | " + " | ".join(score_cell(r[arm].get(n)) for n in names) + " |"
                for r in report["configs"]]
        out.append("")
    return "\n".join(out) + "\n" + INTERVALS + "\n\n" + DEFINITIONS + "\n\n" + SELECTION_NOTE + "\n\n" \
        + "\n".join(f"- {c['words']}" for c in report["comparisons"]) + "\n\n" + "\n\n".join(_closing(report)) + "\n" \
        + "".join(f"\n- {line}" for line in report.get("compute") or [])


# ====================================================================== reading a sweep from MLflow
def compute_lines(tracker, sweep_id: str) -> list[str]:
    """Per seed and configuration, the one compute figure of its population run against the seed's baseline
    (evaluation/compute.py: realised per-adapter spend of both arms, "compute-matched" only within 5%)."""
    runs = S.latest_by_key(S.find_runs(tracker.client, sweep_id)).values()
    by_seed: dict[int, dict] = {}
    for run in runs:
        config, seed = S.config_and_seed(run)
        by_seed.setdefault(seed, {})[config] = run
    out = []
    for seed, configs in sorted(by_seed.items()):
        base = configs.get(S.BASELINE_LABEL)
        for config, run in sorted(configs.items()):
            if config == S.BASELINE_LABEL or base is None:
                continue
            figure = compute.of_runs(run, base)
            out.append(f"compute, seed {seed}, {config}: " + (figure["words"] if figure else "no ledger in one of the runs"))
    return out


def sweep_seed(results: Results | dict, baseline_run: bool = False) -> dict:
    """One seed of a configuration as ``gather`` reads it: ``scored_arms``; a baseline run's (``baseline_run``)
    one adapter is every arm of the baseline configuration, scored with one member."""
    arms = scored_arms(results)
    if baseline_run and "baseline" in arms:
        b = arms["baseline"]
        return {"population mean": b, "weakest": b, "best": b, SCORED: {**arms[SCORED], "members": 1}}
    return arms


def gather(tracker, sweep_id: str) -> tuple[dict[str, dict[int, dict]], list[str]]:
    """({config label: {seed: arms}}, problems found) of a sweep's evaluated runs."""
    runs = S.latest_by_key(S.find_runs(tracker.client, sweep_id))
    if not runs:
        raise ReportError(f"no runs tagged {rl.SWEEP}={sweep_id} in {tracker.client.tracking_uri}")
    configs: dict[str, dict[int, dict]] = {}
    missing = []
    for key, run in sorted(runs.items()):
        try:
            arms = sweep_seed(load_results(tracker, run.info.run_id), run.data.tags.get(rl.KIND) == rl.BASELINE)
        except ReportError as err:  # evaluated, but its members answered different problems: refuse, say where
            raise ReportError(f"run {run.info.run_id} ({key}): {err}") from err
        except Exception:  # noqa: BLE001 - not evaluated (yet): listed, not fatal
            missing.append(key)
            continue
        config, seed = S.config_and_seed(run)
        configs.setdefault(config, {})[seed] = arms
    if not configs:
        raise ReportError(f"no run of sweep {sweep_id} is evaluated; run: populora eval --sweep {sweep_id}")
    return configs, missing
