"""The verdict of a population against its compute-matched baseline: per benchmark and for each average (code /
math / overall, ours and AZR's), the population mean, its weakest and best member, the baseline and the base
model, and the two differences that answer the paper's question, population mean - baseline and weakest member -
baseline, each with a paired 95% interval (problem by problem: every adapter answered the same problems,
``stats.compare``: MOVER over the per-problem difference, honest on few problems); then one line in words.

The arms and the per-problem scores are ``sweep_report``'s (``run_arms``: the final population's per-problem mean,
the cross-fitted weakest / best member, the baseline), so the numbers are those ``populora report`` prints. The
baseline is read from the population's results, or from the baseline run's own evaluation (``with_baseline``:
scored alone, on its own run, it is still the same problems if the evaluation used the same benchmarks and limit;
anything else is refused by ``same_problems``). Beside it, both runs' per-adapter training compute from their
ledgers (``compute_side_by_side``), flagged when they differ by more than 10%.
"""

from __future__ import annotations

import copy

from populora.evaluation.statistics import aggregates, power, stats
from populora.evaluation.harness import benchmarks
from populora.evaluation import compute
from populora.evaluation.statistics.headline import DELTAS, adjust, words
from populora.evaluation.summary import BASE, BASELINE, Results
from populora.evaluation.statistics.sweep_report import _groups, run_arms, same_problems, scored_design, scoring, strata

ARMS = ("population mean", "weakest", "best", "baseline", "base model")
MATCHED_WITHIN = compute.TOLERANCE  # per-adapter compute further apart than this: not compute-matched (evaluation/compute.py)
COMPUTE = ("generated_tokens", "trained_tokens")


def with_baseline(results: dict, baseline_results: dict | None) -> dict:
    """``results`` with the baseline targets of ``baseline_results`` (the baseline run evaluated on its own: its
    one adapter is a target of kind baseline, or of kind member in results made before runs knew their kind)
    added, when ``results`` scored no baseline itself. Neither input is changed.

    >>> pop = {"results": {"T0": {}}, "targets": {"T0": {"kind": "member"}}}
    >>> base = {"results": {"baseline (B0)": {"gsm8k": {"score": 0.5}}}, "targets": {"baseline (B0)": {"kind": "baseline"}}}
    >>> merged = with_baseline(pop, base)
    >>> merged["targets"]["baseline (B0)"]["kind"], "baseline (B0)" in pop["results"]
    ('baseline', False)
    """
    if baseline_results is None or any(t.kind == BASELINE for t in Results.from_dict(results).targets.values()):
        return results
    alone = Results.from_dict(baseline_results)
    label = alone.own_baseline()
    if label is None:
        return results
    out = copy.deepcopy(results)
    name = label if alone.targets[label].kind == BASELINE else f"baseline ({label})"
    out["results"][name] = baseline_results["results"][label]
    out["targets"][name] = {**baseline_results["targets"][label], "kind": BASELINE}
    return out


def _base_arm(r: Results, tables: dict) -> dict | None:
    base = [label for label in r.of_kind(BASE) if tables.get(label)]
    return tables[base[0]] if base else None


def build(results: Results | dict, seed: int = 0, with_aggregates: bool = True) -> dict | None:
    """{"rows": [{"name", "label", <arm>: score, <delta>: comparison dict}], "words": str, "n": {benchmark: n}}
    from a results.json with per-problem samples files on disk; None when nothing has per-problem scores.
    Scores are fractions (0-1); a comparison is ``stats.Comparison.to_dict()`` (delta, ci95, p_value).
    ``with_aggregates`` False: no rliable aggregates (the calibration's worlds: every claim is the same without)."""
    r = Results.of(results)
    arms = run_arms(r)  # the samples files are read once, for both
    if "population mean" not in arms:
        return None
    base = _base_arm(r, r.tables())
    if base is not None:
        arms["base model"] = base
    problems = same_problems(arms)
    rows = []
    bench_names = [b for b in problems if problems[b]]
    strata_of = {arm: strata([arms[arm]], bench_names, problems) for arm in ("population mean", "baseline") if arm in arms}
    agg = aggregates.one_run(strata_of, "baseline", seed=seed) \
        if with_aggregates and "baseline" in strata_of and bench_names else None
    for name, (names, weights) in _groups(problems).items():
        row = {"name": name, "label": benchmarks.BENCHMARKS[name].label if name in benchmarks.BENCHMARKS else name}
        data = {arm: strata([arms[arm]], names, problems) for arm in ARMS if arm in arms}
        for arm, arrays in data.items():
            row[arm] = stats.point(arrays, weights)
        if "baseline" in data:
            for delta, arm in DELTAS:
                row[delta] = stats.compare(delta, data[arm], data["baseline"], seed=seed, weights=weights).to_dict()
        rows.append(row)
    n = {b: len(ps) for b, ps in problems.items()}
    family = adjust(rows)
    design, mde, _ = scored_design([arms["population mean"]], [arms["baseline"]] if "baseline" in arms else None,
                                   problems, scoring(r), family=family)
    for row in rows:  # the population mean's design (the weakest member's, one adapter, is another: no figure)
        if "mean - baseline" in row:
            row["mean - baseline"]["mde"] = mde["per_benchmark"].get(row["name"], mde["overall"] if row["name"] == "overall" else None)
    overall = next((x["mean - baseline"]["delta"] for x in rows if x["name"] == "overall" and "mean - baseline" in x), None)
    need = power.seeds_needed(design, overall) if overall else None
    return {"rows": rows, "words": words(rows, mde, need), "n": n, "mde": mde, "seeds": 1, "seeds_needed": need,
            "level": stats.ADAPTERS, "family": family, "aggregates": agg}


COLUMNS = (*ARMS, *(d for d, _ in DELTAS))  # a verdict row's printed cells (``cells``), in order


def cells(row: dict, empty: str = "") -> list[str]:
    """A verdict row's printed cells in ``COLUMNS`` order: scores in % to 0.1, differences as "+d [lo, hi]" points;
    ``empty`` where the arm or the difference is missing. The one format of ``populora report``'s table (``text``)
    and the Compare page's (ui/compare_table.verdict_frame).

    >>> cells({"population mean": 0.75, "baseline": 1.0, "mean - baseline": {"delta": -0.25, "ci95": [-0.5, 0.0]}}, "-")
    ['75.0', '-', '-', '100.0', '-', '-25.0 [-50.0, +0.0]', '-']
    """
    def score(value):
        return empty if value is None else f"{100 * value:.1f}"

    def delta(c):
        return empty if not c else f"{100 * c['delta']:+.1f} [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"

    return [score(row.get(a)) for a in ARMS] + [delta(row.get(d)) for d, _ in DELTAS]


def text(v: dict) -> str:
    """The verdict as a fixed-width table (scores in %, differences in points with their 95% interval)."""
    head = ["", *COLUMNS]
    lines = [[r["label"], *cells(r)] for r in v["rows"]]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(f"{str(c):>{w}}" for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(line) for line in lines]
                     + ["differences: paired over problems, 95% interval in brackets: MOVER (Zou & Donner 2008) over the "
                        "parts of the per-problem difference (Newcombe 1998's paired construction; never zero width, "
                        "Bowyer, Aitchison & Ivanova 2025), p inverting it (16 problems or fewer: the larger of it "
                        "and the exact sign-flip p) (one seed per arm: these adapters on these problems); p-values Holm-adjusted over every comparison but overall "
                        "mean - baseline (the primary); weakest / best: the member the cross-fit rule picks, not "
                        "the truly weakest / best", "verdict: " + v["words"]]
                     + ([f"compute: {v['compute']}"] if v.get("compute") else [])
                     + (["rliable (Agarwal et al. 2021) over the benchmarks, 95% intervals over problems (Bayesian "
                         "bootstrap, Rubin 1981, with a pseudo-problem at each end of the scale):"]
                        + [f"  {line}" for line in v["aggregates"]["words"]] if v.get("aggregates") else [])) + "\n"


def compute_side_by_side(population: dict[str, float], baseline: dict[str, float],
                         by_rule: bool = False, kl_forward: float = 0.0, note: str = "",
                         models: tuple[dict, dict] | None = None) -> tuple[list[dict], str | None]:
    """Both runs' per-adapter training compute (``compute/per_adapter/<q>`` of each run's ledger) side by side:
    ([{quantity, population, baseline, ratio}], the one compute figure's words (evaluation/compute.py) when the
    arms are not compute-matched (more than 5% apart in generated + trained tokens), else None). ``note``: the
    baseline's ``populora.budget_matched`` (compute.matched_note), in the words.

    >>> rows, warn = compute_side_by_side({"compute/per_adapter/generated_tokens": 256.0,
    ...     "compute/per_adapter/trained_tokens": 300.0}, {"compute/per_adapter/generated_tokens": 512.0,
    ...     "compute/per_adapter/trained_tokens": 310.0})
    >>> [round(r["ratio"], 3) for r in rows], warn.split(" per-adapter")[0]
    ([2.0, 1.033, 1.478, 1.322], "not compute-matched: the baseline spent 1.48x the population's")

    ``by_rule``: the two runs share a ``populora.pair`` (launched together): the words then say the gap is
    realised spend, and where the baseline was not trained to its population's ledger (a run from before the
    ledger-matched baseline), how to get one.

    >>> compute_side_by_side({"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 137.0},
    ...                      {"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 208.0}, by_rule=True)[1][:42]
    'not compute-matched: the baseline spent 1.'
    """
    rows = []
    for q in COMPUTE:
        p, b = population.get(f"compute/per_adapter/{q}"), baseline.get(f"compute/per_adapter/{q}")
        rows.append({"quantity": q.replace("_", " ") + " per adapter", "population": p, "baseline": b,
                     "ratio": b / p if p and b is not None else None})
    fig = compute.figure(population, baseline, kl_forward, note, models)
    if fig is not None:
        rows.append({"quantity": "generated + trained tokens per adapter", "population": fig["population"],
                     "baseline": fig["baseline"], "ratio": fig["ratio"]})
        if fig["flops"]:  # each arm's own figure ("relative: 1 / 1 / ratio 0.67" read as whole numbers)
            rows.append({"quantity": f"{fig['flops_unit']} per adapter", "population": fig["flops"][0],
                         "baseline": fig["flops"][1], "ratio": fig["flops_ratio"]})
    fix = matching_advice(fig, by_rule, note)
    if fig is None or fig["matched"]:
        return rows, None
    return rows, f"{fig['words']}; {fix}" if fix else fig["words"]


def matching_advice(fig: dict | None, by_rule: bool = False, note: str = "") -> str | None:
    """What to do about a compute figure (``compute.figure``) that is not matched: None when it is matched, absent,
    or across base models (no advice: they cannot be matched); ``by_rule`` (launched together) says the gap is
    realised spend, and, without the baseline's own ``note`` on why it stopped short, how to get a matched one.

    >>> matching_advice({"matched": False, "words": "not compute-matched: ..."})[:29]
    'train the baseline with the m'
    >>> matching_advice({"matched": True, "words": "compute-matched"}) is None
    True
    """
    if fig is None or fig["matched"] or fig["words"].startswith("not comparable"):
        return None
    if by_rule and note:  # launched together, and the baseline's end says why it could not match
        return "the two were launched together (populora.pair), so this is realised spend"
    if by_rule:  # launched together: the gap is what the runs realised
        return ("the two were launched together (populora.pair), so this is realised spend: "
                "a baseline trained to its population's ledger (budget.population, the default of Launch's "
                "baseline box and --baseline since issue 53) ends within 5%; this one did not (trained before, "
                "stopped early, or its step cap came first)")
    return ("train the baseline with the matched rule (Launch's baseline box, populora train "
            "--baseline), which trains it to the population's per-adapter ledger")
