"""The headline of a verdict, built on adjusted results only: Holm's family over every comparison but the primary,
and the line in words ("population mean beats the baseline on k of 10 benchmarks"), saying what it speaks for
(one training seed per arm: these adapters on these problems; two or more: the method) and the smallest
difference the design detects. Used by the verdict of one run (``verdict.py``) and of a sweep's configurations
(``sweep_report.py``); rows are ``verdict.build``'s: {"name": benchmark or average, <delta>: comparison dict}.

Why Holm (1979) and not Benjamini-Hochberg: the headline names benchmarks one by one ("beats it on GSM8K and
MATH-500"), a claim a reader takes as each being true, which is the family-wise error rate; Holm controls it
under any dependence between the tests (benchmarks trained by one seed are correlated), and is uniformly more
powerful than Bonferroni. BH controls the expected share of false claims among the claims (FDR), a weaker
promise with 20 tests, and needs positive dependence.
"""

from __future__ import annotations

import re

from populora.evaluation.harness import benchmarks
from populora.evaluation.statistics import families, power, stats

DELTAS, PRIMARY = families.DELTAS, families.PRIMARY  # the families: families.py
OVERALL_KEY = power.OVERALL  # the overall cell of an MDE's "needs"
ADAPTERS_LEAD = "comparing these adapters on these problems (one training seed per arm, not the method), "
ONE_SEED = ("One training seed per arm: this describes these adapters on these problems, not the method (another "
            "seed trains other adapters); a claim about the method needs >= 2 seeds per arm")


def adjust(rows: list[dict], primary_adjusted: float | None = None) -> int:
    """Holm-adjust (``stats.holm``) the p-values of every comparison in ``rows`` but the primary (``PRIMARY``),
    in place (``p_adjusted``, ``significant``): one configuration's secondary family (``families.py``); the
    primary gets ``primary_adjusted`` (its p adjusted among the configurations of a sweep; None: a family of
    one, its own p). Returns the secondary family's size."""
    cells = [(r, d) for r in rows for d, _ in DELTAS if d in r and (r["name"], d) != PRIMARY]
    for (r, d), p in zip(cells, stats.holm([r[d]["p_value"] for r, d in cells]) if cells else []):
        r[d]["p_adjusted"] = p
        r[d]["significant"] = p < 1 - stats.CONFIDENCE
    for r in rows:
        if PRIMARY[1] in r and r["name"] == PRIMARY[0]:
            c = r[PRIMARY[1]]
            c["p_adjusted"] = c["p_value"] if primary_adjusted is None else primary_adjusted
            c["significant"] = c["p_adjusted"] < 1 - stats.CONFIDENCE
    return len(cells)


def words(rows: list[dict], mde: dict | None = None, seeds_needed: int | None = None, seeds: int = 1) -> str:
    """The verdict in one line, over the benchmarks (not the averages), built on the Holm-adjusted results
    (``adjust``): on how many the population mean and the weakest member beat the baseline (adjusted p < 0.05,
    higher), how many are lower, and how many were merely higher before adjustment; the overall difference
    (the primary: adjusted among a sweep's configurations only), its MDE, and what it speaks for (one seed: these
    adapters on these problems, said in the sentence that names the benchmarks; >= 2: the method).

    >>> r = lambda d, lo, hi, p: {"delta": d, "ci95": [lo, hi], "p_value": p}
    >>> rows = [{"name": "gsm8k", "mean - baseline": r(0.1, 0.05, 0.2, 0.001), "weakest - baseline": r(-0.1, -0.3, 0.1, 0.3)},
    ...         {"name": "aime24", "mean - baseline": r(0.02, -0.1, 0.1, 0.6), "weakest - baseline": r(-0.2, -0.3, -0.1, 0.01)},
    ...         {"name": "overall", "mean - baseline": r(0.05, 0.01, 0.1, 0.02)}]
    >>> _ = adjust(rows)
    >>> words(rows)
    'comparing these adapters on these problems (one training seed per arm, not the method), population mean beats the baseline on 1 of 2 benchmarks (Holm-adjusted p < 0.05: 1 above, 0 below; higher on 2 before adjustment); weakest member beats it on 0 of 2 (0 above, 1 below; higher on 0); overall: +5.0 pts, 95% CI +1.0 to +10.0 (p=0.02, the primary comparison: higher). One training seed per arm: this describes these adapters on these problems, not the method (another seed trains other adapters); a claim about the method needs >= 2 seeds per arm.'
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
        lead = ADAPTERS_LEAD if first and seeds == 1 else ""
        parts.append(f"{lead}{what} beats {it} on {above} of {len(cs)}" + (" benchmarks" if first else "")
                     + (" (Holm-adjusted p < 0.05: " if first else " (") + f"{above} above, {below} below; higher on {raw}"
                     + (" before adjustment)" if first else ")"))
    overall = next((r for r in rows if r["name"] == "overall" and "mean - baseline" in r), None)
    if overall:
        c = overall["mean - baseline"]
        p = c.get("p_adjusted") if c.get("p_adjusted") is not None else c["p_value"]
        verdict = ("higher" if c["delta"] > 0 else "lower") if p < 1 - stats.CONFIDENCE else "no difference this data can tell from noise"
        adj = "" if abs(p - c["p_value"]) < 1e-9 else f", Holm-adjusted over the configurations p={p:.2g}"
        parts.append(f"overall: {100 * c['delta']:+.1f} pts, 95% CI {100 * c['ci95'][0]:+.1f} to {100 * c['ci95'][1]:+.1f} "
                     f"(p={c['p_value']:.2g}{adj}, the primary comparison: {verdict})")
    text = "; ".join(parts) + ". "
    if seeds > 1:
        text += f"{seeds} training seeds per arm: a claim about the method (the seed variance is in every interval)."
    else:
        text += ONE_SEED + (f" ({seeds_needed} per arm would detect the overall difference seen here at 80% power)"
                            if seeds_needed else "") + "."
    if mde is not None:
        text += f" Smallest difference this design detects: {power.detail(mde)}; " \
            f"{power.seed_words({'shared': power.SHARED_DEFAULT, **mde})}."
    return text


def _would(need: str | None) -> str | None:
    """The figure of a "needs" line ("needs >= 6 problems per benchmark (one seed: ...)" -> ">= 6 problems per
    benchmark").

    >>> _would("needs >= 6 problems per benchmark (one seed: the exact sign-flip test's smallest p ...)")
    '>= 6 problems per benchmark'
    >>> _would("not detectable at 80% power with one seed per arm at any number of problems: needs >= 2 seeds per arm")
    '>= 2 seeds per arm'
    >>> _would(None) is None
    True
    """
    found = re.search(r"needs (>= \d+ [a-z ]+?)(?: \(|;|$)", need or "")
    return found.group(1) if found else None


def plain(v: dict | None) -> str:
    """The verdict in one plain sentence, the report's and the Compare page's: the primary comparison (overall
    population mean - baseline) as detected, not detected (with the smallest difference the design would see),
    or not detectable at all (with what would make it so); then the benchmarks Holm names, and the weakest member
    where it differs. The numbers behind it: ``words`` and the footnotes.

    >>> r = lambda d, lo, hi, p: {"delta": d, "ci95": [lo, hi], "p_value": p}
    >>> rows = [{"name": "gsm8k", "mean - baseline": r(0.0, -0.6, 0.6, 1.0)}, {"name": "overall", "mean - baseline": r(0.0, -0.6, 0.6, 1.0)}]
    >>> _ = adjust(rows)
    >>> plain({"rows": rows, "n": {"gsm8k": 2}, "seeds": 1, "mde": {"overall": None, "needs": {"overall": "needs >= 6 problems per benchmark (one seed: ...)"}}})
    'no difference this data can detect: 2 problems per benchmark cannot show one; >= 6 problems per benchmark would.'
    >>> rows[1]["mean - baseline"] = r(0.05, 0.01, 0.09, 0.01); _ = adjust(rows)
    >>> plain({"rows": rows, "n": {"gsm8k": 400}, "seeds": 1, "mde": {"overall": 0.04, "needs": {}}})
    'these adapters: the population mean scores higher than the baseline overall, +5.0 pts [+1.0, +9.0].'
    """
    if not v:
        return "no verdict: no per-problem scores (the samples files of this evaluation are not on this machine)."
    overall = next((x for x in v["rows"] if x["name"] == "overall" and "mean - baseline" in x), None)
    if overall is None:
        return "no verdict: no baseline scored on the same problems."
    c, seeds = overall["mean - baseline"], v.get("seeds", 1)
    pts = f"{100 * c['delta']:+.1f} pts [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"
    ns = sorted(set((v.get("n") or {}).values())) or [0]
    problems = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    design = f"{problems} problems per benchmark" + (f" and {seeds} seeds per arm" if seeds > 1 else "")
    mde = v.get("mde") or {}
    if c.get("significant"):
        lead = "these adapters: " if seeds == 1 else ""
        text = f"{lead}the population mean scores {'higher' if c['delta'] > 0 else 'lower'} than the baseline overall, {pts}"
    elif mde.get("overall") is None and mde:
        would = _would((mde.get("needs") or {}).get(OVERALL_KEY))
        text = f"no difference this data can detect: {design} cannot show one" + (f"; {would} would" if would else "")
    else:
        text = f"no difference detected overall: {pts}" + (
            f"; {design} detect >= {100 * mde['overall']:.1f} pts" if mde.get("overall") is not None else "")
    named = []
    for delta, who in (("mean - baseline", "population mean"), ("weakest - baseline", "weakest member")):
        hits = [(x, x[delta]) for x in v["rows"] if x["name"] in benchmarks.BENCHMARKS and x.get(delta, {}).get("significant")]
        for sign, word in ((1, "higher"), (-1, "lower")):
            labels = [benchmarks.BENCHMARKS[x["name"]].label for x, d in hits if d["delta"] * sign > 0]
            if labels:
                named.append(f"{who} {word} on {', '.join(labels)}")
    return text + ("; Holm names: " + "; ".join(named) if named else "") + "."
