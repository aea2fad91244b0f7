"""The verdict of a population against its compute-matched baseline: per benchmark and for each average (code /
math / overall, ours and AZR's), the population mean, its weakest and best member, the baseline and the base
model, and the two differences that answer the paper's question, population mean - baseline and weakest member -
baseline, each with a paired bootstrap 95% interval (problem by problem: every adapter answered the same
problems, ``stats.compare``); then one line in words.

The arms and the per-problem scores are ``sweep_report``'s (``run_arms``: the final population's per-problem mean,
the cross-fitted weakest / best member, the baseline), so the numbers are those ``populora report`` prints. The
baseline is read from the population's results, or from the baseline run's own evaluation (``with_baseline``:
scored alone, on its own run, it is still the same problems if the evaluation used the same benchmarks and limit;
anything else is refused by ``same_problems``). Beside it, both runs' per-adapter training compute from their
ledgers (``compute_side_by_side``), flagged when they differ by more than 10%.
"""

from __future__ import annotations

import copy

from populora.evaluation import benchmarks, power, stats
from populora.evaluation.summary import BASE, BASELINE, MEMBER, Results
from populora.evaluation.sweep_report import _groups, run_arms, same_problems, strata

ARMS = ("population mean", "weakest", "best", "baseline", "base model")
PRIMARY = ("overall", "mean - baseline")  # the one pre-specified comparison, at its own 5%; every other is in Holm's family
ONE_SEED = ("One training seed per arm: this describes these adapters on these problems, not the method (another "
            "seed trains other adapters); a claim about the method needs >= 2 seeds per arm")
DELTAS = (("mean - baseline", "population mean"), ("weakest - baseline", "weakest"))
MATCHED_WITHIN = 0.10  # per-adapter compute further apart than this: not compute-matched (the one threshold: report, Compare)
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


def build(results: Results | dict, seed: int = 0) -> dict | None:
    """{"rows": [{"name", "label", <arm>: score, <delta>: comparison dict}], "words": str, "n": {benchmark: n}}
    from a results.json with per-problem samples files on disk; None when nothing has per-problem scores.
    Scores are fractions (0-1); a comparison is ``stats.Comparison.to_dict()`` (delta, ci95, p_value)."""
    r = Results.of(results)
    arms = run_arms(r)  # the samples files are read once, for both
    if "population mean" not in arms:
        return None
    base = _base_arm(r, r.tables())
    if base is not None:
        arms["base model"] = base
    problems = same_problems(arms)
    rows = []
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
    members = len(r.final_members([t for t in r.of_kind(MEMBER) if t in r.scores])) or power.MEMBERS
    design = power.Design(power.beta_p({x["name"]: x.get("baseline", x["population mean"]) for x in rows}, n),
                          seeds=1, members=members, family=max(family, 1))
    mde = power.mde(design)
    for row in rows:
        for delta, _ in DELTAS:
            if delta in row:
                row[delta]["mde"] = mde["per_benchmark"].get(row["name"], mde["overall"] if row["name"] == "overall" else None)
    overall = next((x["mean - baseline"]["delta"] for x in rows if x["name"] == "overall" and "mean - baseline" in x), None)
    need = power.seeds_needed(design, overall) if overall else None
    return {"rows": rows, "words": words(rows, mde, need), "n": n, "mde": mde, "seeds": 1, "seeds_needed": need,
            "level": stats.ADAPTERS, "family": family}


def adjust(rows: list[dict]) -> int:
    """Holm-adjust (``stats.holm``) the p-values of every comparison in ``rows`` but the primary (``PRIMARY``),
    in place (``p_adjusted``, ``significant``); returns the family's size."""
    cells = [(r, d) for r in rows for d, _ in DELTAS if d in r and (r["name"], d) != PRIMARY]
    for (r, d), p in zip(cells, stats.holm([r[d]["p_value"] for r, d in cells]) if cells else []):
        r[d]["p_adjusted"] = p
        r[d]["significant"] = p < 1 - stats.CONFIDENCE
    for r in rows:
        if PRIMARY[1] in r and r["name"] == PRIMARY[0]:
            r[PRIMARY[1]]["significant"] = r[PRIMARY[1]]["p_value"] < 1 - stats.CONFIDENCE
    return len(cells)


def words(rows: list[dict], mde: dict | None = None, seeds_needed: int | None = None, seeds: int = 1) -> str:
    """The verdict in one line, over the benchmarks (not the averages), built on the Holm-adjusted results
    (``adjust``): on how many the population mean and the weakest member beat the baseline (adjusted p < 0.05,
    higher), how many are lower, and how many were merely higher before adjustment; the overall difference
    (the primary, unadjusted), its MDE, and what it speaks for (one seed: these adapters; >= 2: the method).

    >>> r = lambda d, lo, hi, p: {"delta": d, "ci95": [lo, hi], "p_value": p}
    >>> rows = [{"name": "gsm8k", "mean - baseline": r(0.1, 0.05, 0.2, 0.001), "weakest - baseline": r(-0.1, -0.3, 0.1, 0.3)},
    ...         {"name": "aime24", "mean - baseline": r(0.02, -0.1, 0.1, 0.6), "weakest - baseline": r(-0.2, -0.3, -0.1, 0.01)},
    ...         {"name": "overall", "mean - baseline": r(0.05, 0.01, 0.1, 0.02)}]
    >>> _ = adjust(rows)
    >>> words(rows)
    'population mean beats the baseline on 1 of 2 benchmarks (Holm-adjusted p < 0.05: 1 above, 0 below; higher on 2 before adjustment); weakest member beats it on 0 of 2 (0 above, 1 below; higher on 0); overall: +5.0 pts, 95% CI +1.0 to +10.0. One training seed per arm: this describes these adapters on these problems, not the method (another seed trains other adapters); a claim about the method needs >= 2 seeds per arm.'
    """
    per = [r for r in rows if r["name"] in benchmarks.BENCHMARKS and "mean - baseline" in r]
    if not per:
        return "no baseline scored on the same problems: nothing to compare with"
    parts = []
    for delta, what, it in (("mean - baseline", "population mean", "the baseline"), ("weakest - baseline", "weakest member", "it")):
        cs = [r[delta] for r in per if delta in r]
        if not cs:
            continue
        sig = [c for c in cs if c.get("significant", c.get("p_adjusted", c["p_value"]) < 1 - stats.CONFIDENCE)]
        above, below = sum(c["delta"] > 0 for c in sig), sum(c["delta"] < 0 for c in sig)
        raw = sum(c["delta"] > 0 for c in cs)
        first = not parts
        parts.append(f"{what} beats {it} on {above} of {len(cs)}" + (" benchmarks" if first else "")
                     + (" (Holm-adjusted p < 0.05: " if first else " (") + f"{above} above, {below} below; higher on {raw}"
                     + (" before adjustment)" if first else ")"))
    overall = next((r for r in rows if r["name"] == "overall" and "mean - baseline" in r), None)
    if overall:
        c = overall["mean - baseline"]
        parts.append(f"overall: {100 * c['delta']:+.1f} pts, 95% CI {100 * c['ci95'][0]:+.1f} to {100 * c['ci95'][1]:+.1f}")
    text = "; ".join(parts) + ". "
    if seeds > 1:
        text += f"{seeds} training seeds per arm: a claim about the method (the seed variance is in every interval)."
    else:
        text += ONE_SEED + (f" ({seeds_needed} per arm would detect the overall difference seen here at 80% power)"
                            if seeds_needed else "") + "."
    if mde is not None:
        text += f" Smallest difference this design detects: {power.detail(mde)}."
    return text


def _cell(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}"


def _delta_cell(c: dict | None) -> str:
    return "" if not c else f"{100 * c['delta']:+.1f} [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"


def text(v: dict) -> str:
    """The verdict as a fixed-width table (scores in %, differences in points with their 95% interval)."""
    head = ["", *ARMS, *(d for d, _ in DELTAS)]
    lines = [[r["label"], *(_cell(r.get(a)) for a in ARMS), *(_delta_cell(r.get(d)) for d, _ in DELTAS)] for r in v["rows"]]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(f"{str(c):>{w}}" for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(line) for line in lines]
                     + ["differences: paired bootstrap over problems, 95% interval in brackets (one seed per arm: these "
                        "adapters on these problems); p-values Holm-adjusted over every comparison but overall "
                        "mean - baseline (the primary); weakest / best: the member the cross-fit rule picks, not "
                        "the truly weakest / best", "verdict: " + v["words"]]) + "\n"


def compute_side_by_side(population: dict[str, float], baseline: dict[str, float]) -> tuple[list[dict], str | None]:
    """Both runs' per-adapter training compute (``compute/per_adapter/<q>`` of each run's ledger) side by side:
    ([{quantity, population, baseline, ratio}], a warning when a ratio is off 1 by more than 10%, else None).

    >>> rows, warn = compute_side_by_side({"compute/per_adapter/generated_tokens": 256.0,
    ...     "compute/per_adapter/trained_tokens": 300.0}, {"compute/per_adapter/generated_tokens": 512.0,
    ...     "compute/per_adapter/trained_tokens": 310.0})
    >>> [r["ratio"] for r in rows], warn.split(" per adapter")[0]
    ([2.0, 1.0333333333333334], "not compute-matched: the baseline has 2.00x the population's generated tokens")
    """
    rows, off = [], []
    for q in COMPUTE:
        p, b = population.get(f"compute/per_adapter/{q}"), baseline.get(f"compute/per_adapter/{q}")
        ratio = b / p if p and b is not None else None
        rows.append({"quantity": q.replace("_", " ") + " per adapter", "population": p, "baseline": b, "ratio": ratio})
        if ratio is not None and abs(ratio - 1) > MATCHED_WITHIN:
            off.append(f"{ratio:.2f}x the population's {q.replace('_', ' ')}")
    warning = None
    if off:
        warning = (f"not compute-matched: the baseline has {' and '.join(off)} per adapter (more than 10% apart); "
                   "train the baseline with the matched rule (Launch's baseline box, populora train --baseline)")
    return rows, warning
