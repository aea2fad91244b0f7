"""Known-truth simulations of the verdict's claims, run through the platform's own statistics (``stats``,
``selection``, ``power``): does a claim worded at 5% fire 5% of the time when there is nothing to find, does a 95%
interval cover, does the promised MDE come with 80% power? ``populora bench stats --json`` prints the table, then
the report as printed in worlds of other generative models (``calibration_worlds``; ``--small-n``: 3-30 problems
per benchmark); ``tests/evaluation/test_calibration.py`` runs a small fixed-seed version.

The simulated world (each replicate draws it afresh):
- the ten benchmarks at their real sizes (the data dir's files, ``estimate.items``; ``SIZES`` when absent);
- per problem a success probability p_i ~ Beta(m_b K, (1 - m_b) K), m_b the benchmark's assumed base score
  (``BASE_SCORE``), K = ``CONCENTRATION`` (U-shaped: most problems nearly always or nearly never solved);
- a training run (one seed of an arm) moves its adapters by u ~ N(0, sigma) logits: one u per benchmark, or one
  shared by all benchmarks of the run (``shared``); a population's members share their run's u, and member m
  adds its own offset (``spread``: members spread evenly over +-spread logits, 0 by default);
- greedy scoring: each adapter solves problem i with probability sigmoid(logit p_i + u + offset), one draw;
- arms: "population mean" (the per-problem mean of 4 members), the cross-fit weakest member
  (``selection.cross_fit``), the baseline (one adapter per run). A planted effect adds ``effect`` logits to every
  population member.

Claims, before (the statistics as they were) and after:
- one seed per arm: before, "the interval excludes 0" of the problem bootstrap (``stats.compare``) was worded as
  "higher"/"lower" with no word on seeds: read as a claim about the method, it fires whenever seeds differ. After,
  one-seed comparisons speak for the adapters only (``level``), so the method-level claim is never made; their
  Holm family's rate and coverage of what they do claim (the adapters' own difference) are measured instead;
- three seeds per arm: before, the crossed two-level bootstrap (``stats.compare``/``bootstrap_distribution``
  with S rows); after, ``stats.seed_compare`` / ``seed_estimate`` with ``stats.holm`` over the family of
  10 benchmarks x 2 differences (population mean and weakest member vs the baseline);
- the headline: before, "beats the baseline on k of 10" counted raw signs (its rate of k >= 7 under the null);
  after, it counts Holm-significant benchmarks only (fires with the family-wise rate).
Monte Carlo error of a rate r over R replicates: sqrt(r (1 - r) / R) (at least that of the nominal rate).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import optimize
from scipy import stats as sps

from populora.evaluation.statistics import calibration_worlds as W
from populora.evaluation.statistics import power, selection, stats
from populora.evaluation.statistics.calibration_worlds import mc_error

SIZES, BASE_SCORE, CONCENTRATION = power.SIZES, power.BASE_SCORE, power.CONCENTRATION
MEMBERS = power.MEMBERS
ALPHA = 0.05
BOOT = 300  # bootstrap resamples in the simulated bootstrap claims (the report uses 4000; 300 moves a percentile
            # endpoint by ~0.15 standard errors: a coverage of 0.95 reads ~0.945, well inside the Monte Carlo error)


@dataclass(frozen=True)
class Regime:
    name: str
    sigma: float = 0.0         # seed effect, logits
    shared: bool = False       # one seed effect for every benchmark of a run
    seeds: int = 3             # per arm
    effect: float = 0.0        # planted: logits added to every population member
    spread: float = 0.0        # members' own offsets, evenly over +-spread logits
    baseline_shift: float = 0.0  # logits added to the baseline (-spread: the baseline equals the truly weakest)


REGIMES = [Regime(f"null sigma={s:g}{' shared' if sh else ''}", s, sh)
           for s, sh in ((0.0, False), (0.1, False), (0.2, False), (0.1, True), (0.2, True))]


sizes = power.sizes


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _logits(rng, n: dict[str, int]) -> dict[str, np.ndarray]:
    out = {}
    for b, size in n.items():
        m = BASE_SCORE[b]
        p = np.clip(rng.beta(m * CONCENTRATION, (1 - m) * CONCENTRATION, size), 1e-4, 1 - 1e-4)
        out[b] = np.log(p / (1 - p))
    return out


def _seed_effects(rng, r: Regime, names: list[str]) -> np.ndarray:
    """(seeds, benchmarks) logits of one arm's runs."""
    if r.shared:
        return np.repeat(rng.normal(0, r.sigma, (r.seeds, 1)), len(names), axis=1)
    return rng.normal(0, r.sigma, (r.seeds, len(names)))


def offsets(r: Regime) -> np.ndarray:
    return np.linspace(-r.spread, r.spread, MEMBERS) + r.effect


def simulate(rng, r: Regime, n: dict[str, int]):
    """(logits {b: (P,)}, population members {b: (S, M, P)}, baseline {b: (S, P)}, seed effects (pop, base))."""
    names = list(n)
    logits = _logits(rng, n)
    u_pop, u_base = _seed_effects(rng, r, names), _seed_effects(rng, r, names)
    off = offsets(r)
    members, base = {}, {}
    for j, b in enumerate(names):
        lp = logits[b][None, None, :] + u_pop[:, j, None, None] + off[None, :, None]          # (S, M, P)
        members[b] = (rng.random(lp.shape) < _sigmoid(lp)).astype(float)
        lb = logits[b][None, :] + u_base[:, j, None] + r.baseline_shift                         # (S, P)
        base[b] = (rng.random(lb.shape) < _sigmoid(lb)).astype(float)
    return logits, members, base, (u_pop, u_base)


# ====================================================================== the truth, by quadrature
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
_QUANTILES = (np.arange(4000) + 0.5) / 4000


@functools.lru_cache(maxsize=None)
def _grid(b: str, n: int = len(_QUANTILES)) -> np.ndarray:
    """``n`` evenly spaced quantiles of benchmark ``b``'s per-problem success probability (its Beta)."""
    m = BASE_SCORE[b]
    q = (np.arange(n) + 0.5) / n
    return np.clip(sps.beta.ppf(q, m * CONCENTRATION, (1 - m) * CONCENTRATION), 1e-4, 1 - 1e-4)


@functools.lru_cache(maxsize=None)
def expected_score(b: str, shift: float, sigma: float = 0.0) -> float:
    """E over problems of benchmark ``b`` (the Beta) and seeds (N(0, sigma) logits) of sigmoid(logit p + shift)."""
    p = _grid(b)
    lp = np.log(p / (1 - p))
    return float(np.mean(_sigmoid(lp[:, None] + shift + sigma * _NODES[None, :]) @ _WEIGHTS))


def design_p(n: dict[str, int]) -> dict[str, np.ndarray]:
    """The per-problem probabilities ``power.Design`` takes for the simulated world: n_b quantiles of the Beta."""
    return {b: _grid(b, size) for b, size in n.items()}


def true_difference(r: Regime, names: list[str]) -> dict[str, float]:
    """{benchmark: E(population mean) - E(baseline)} of a regime (its members' offsets and effect included)."""
    return {b: float(np.mean([expected_score(b, o, r.sigma) for o in offsets(r)])
                     - expected_score(b, r.baseline_shift, r.sigma)) for b in names}


# ====================================================================== the claims of one replicate
def _weakest(members: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """The cross-fit weakest member's per-problem scores of one seed, by ``selection.cross_fit`` itself."""
    ids = [f"{i:05d}" for i in range(max(x.shape[-1] for x in members.values()))]
    tables = {f"M{m}": {b: dict(zip(ids, x[seed, m].tolist())) for b, x in members.items()} for m in range(MEMBERS)}
    pick = selection.cross_fit(tables, "weakest")
    return {b: np.array([pick.scores[b][i] for i in ids[:members[b].shape[-1]]]) for b in members}


def arms(members, base, weakest: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """{arm: {benchmark: (S, P)}}."""
    out = {"population mean": {b: x.mean(axis=1) for b, x in members.items()}, "baseline": base}
    if weakest:
        seeds = next(iter(base.values())).shape[0]
        picks = [_weakest(members, s) for s in range(seeds)]
        out["weakest"] = {b: np.stack([p[b] for p in picks]) for b in members}
    return out


def _claims_after(a: dict, names: list[str], truth: dict[str, float]) -> dict:
    """The method-level claims (S >= 2) of one replicate: per benchmark and overall, Holm over the family."""
    out = {}
    family = []
    for arm in [x for x in ("population mean", "weakest") if x in a]:
        for b in names:
            c = stats.seed_compare(b, [a[arm][b]], [a["baseline"][b]])
            family.append(c)
            if arm == "population mean":
                out[f"fires {b}"] = c.p_value < ALPHA
                out[f"covers {b}"] = c.ci95[0] <= truth[b] <= c.ci95[1]
    adjusted = stats.holm([c.p_value for c in family])
    out["family fires"] = min(adjusted) < ALPHA
    # the headline "beats the baseline on k of 10" counts Holm-significant wins of the population mean only
    out["headline >= 1"] = sum(adjusted[i] < ALPHA and family[i].delta > 0 for i in range(len(names))) >= 1
    overall = stats.seed_compare("overall", [a["population mean"][b] for b in names], [a["baseline"][b] for b in names])
    true_overall = float(np.mean([truth[b] for b in names]))
    out["fires overall"] = overall.p_value < ALPHA
    out["covers overall"] = overall.ci95[0] <= true_overall <= overall.ci95[1]
    return out


def _claims_before(a: dict, names: list[str], truth: dict[str, float], seed: int) -> dict:
    """The claims as the statistics made them before: the bootstrap's "interval excludes 0", raw sign counts."""
    out = {}
    excludes = []
    for arm in [x for x in ("population mean", "weakest") if x in a]:
        for b in names:
            c = stats.compare(b, [a[arm][b]], [a["baseline"][b]], seed=seed, n_resamples=BOOT)
            excludes.append(not c.includes_zero)
            if arm == "population mean":
                out[f"fires {b}"] = not c.includes_zero
                out[f"covers {b}"] = c.ci95[0] <= truth[b] <= c.ci95[1]
                out.setdefault("positive", 0)
                out["positive"] += c.delta > 0
    out["family fires"] = any(excludes)
    out["headline >= 7"] = out.pop("positive") >= 7
    overall = stats.compare("overall", [a["population mean"][b] for b in names], [a["baseline"][b] for b in names],
                            seed=seed, n_resamples=BOOT)
    true_overall = float(np.mean([truth[b] for b in names]))
    out["fires overall"] = not overall.includes_zero
    out["covers overall"] = overall.ci95[0] <= true_overall <= overall.ci95[1]
    return out


def _arm_coverage(a: dict, names: list[str], r: Regime, after: bool) -> dict:
    """Does the interval of the population mean's overall score cover its expected score (over seeds and the
    benchmark's problem distribution)? After: ``seed_estimate``; before: the crossed two-level bootstrap."""
    strata = [a["population mean"][b] for b in names]
    truth = float(np.mean([np.mean([expected_score(b, o, r.sigma) for o in offsets(r)]) for b in names]))
    if after:
        ci = stats.seed_estimate(strata).ci95
    else:
        ci, _ = stats.bootstrap_distribution(strata, n_resamples=BOOT)
    return {"arm covers overall": ci[0] <= truth <= ci[1]}


def _adapter_truth(r: Regime, names: list[str], u) -> dict[str, float]:
    """{benchmark: the expected difference of these adapters (one seed: their own seed effects)}: the estimand of
    a one-seed comparison."""
    u_pop, u_base = u
    out = {}
    for j, b in enumerate(names):
        p = _grid(b)
        lp = np.log(p / (1 - p))
        pop = np.mean([_sigmoid(lp + u_pop[0, j] + o).mean() for o in offsets(r)])
        out[b] = float(pop - _sigmoid(lp + u_base[0, j] + r.baseline_shift).mean())
    return out


def _one_seed_after(a: dict, names: list[str], adapter_truth: dict[str, float], seed: int) -> dict:
    """One seed per arm, after: no method-level claim is made (the words speak for the adapters); the adapters'
    own comparisons, Holm over the family, and their coverage of the adapters' own difference."""
    family = []
    out = {"method claim made": False}
    for arm in [x for x in ("population mean", "weakest") if x in a]:
        for b in names:
            c = stats.compare(b, [a[arm][b]], [a["baseline"][b]], seed=seed, n_resamples=BOOT)
            family.append(c)
            if arm == "population mean":
                out[f"adapters covers {b}"] = c.ci95[0] <= adapter_truth[b] <= c.ci95[1]
    adjusted = stats.holm([c.p_value for c in family])
    out["adapters family fires"] = min(adjusted) < ALPHA
    overall = stats.compare("overall", [a["population mean"][b] for b in names], [a["baseline"][b] for b in names],
                            seed=seed, n_resamples=BOOT)
    t = float(np.mean([adapter_truth[b] for b in names]))
    out["adapters covers overall"] = overall.ci95[0] <= t <= overall.ci95[1]
    return out


def replicate(rng, r: Regime, n: dict[str, int], before: bool, seed: int, weakest: bool = True) -> dict:
    """Every claim's outcome (True: fired / covered) in one simulated world of regime ``r`` (``weakest``: the
    family holds the weakest member's differences too, cross-fitted per seed: the time of a world doubles)."""
    names = list(n)
    _, members, base, u = simulate(rng, r, n)
    a = arms(members, base, weakest=weakest)
    truth = true_difference(r, names)
    out = {}
    if r.seeds >= 2:
        out.update({f"after {k}": v for k, v in _claims_after(a, names, truth).items()})
        out.update({f"after {k}": v for k, v in _arm_coverage(a, names, r, True).items()})
    else:
        out.update({f"after {k}": v for k, v in _one_seed_after(a, names, _adapter_truth(r, names, u), seed).items()})
    if before:
        out.update({f"before {k}": v for k, v in _claims_before(a, names, truth, seed).items()})
        if r.seeds >= 2:
            out.update({f"before {k}": v for k, v in _arm_coverage(a, names, r, False).items()})
    return out


def summarize(outcomes: list[dict], names: list[str]) -> dict:
    """{claim: {"rate", "mc_error"}} over replicates; per-benchmark claims also averaged ("... mean") and the
    worst benchmark ("... max", named)."""
    reps = len(outcomes)
    keys = list(outcomes[0])
    out = {}
    for k in keys:
        rate = float(np.mean([o[k] for o in outcomes]))
        nominal = 0.95 if "covers" in k else ALPHA
        out[k] = {"rate": rate, "mc_error": mc_error(rate, reps, nominal)}
    for prefix in sorted({k.rsplit(" ", 1)[0] for k in keys if k.rsplit(" ", 1)[-1] in names}):
        rates = {b: out.pop(f"{prefix} {b}")["rate"] for b in names}
        mean = float(np.mean(list(rates.values())))
        worst = (max if "fires" in prefix else min)(rates, key=rates.get)
        nominal = 0.95 if "covers" in prefix else ALPHA
        out[f"{prefix} (mean of benchmarks)"] = {"rate": mean, "mc_error": mc_error(mean, reps * len(names), nominal)}
        out[f"{prefix} (worst: {worst})"] = {"rate": rates[worst], "mc_error": mc_error(rates[worst], reps, nominal)}
    return out


def planted(n: dict[str, int], sigma: float = 0.1, seeds: int = 3) -> tuple[Regime, float]:
    """(a regime whose overall true difference is the MDE ``power.mde`` promises for ``seeds`` seeds, that MDE)."""
    design = power.Design(design_p(n), seeds=seeds, sigma=sigma, shared=False)  # the regime's per-benchmark seeds
    target = power.mde(design)["overall"]
    names = list(n)

    def gap(effect):
        return float(np.mean(list(true_difference(Regime("", sigma, seeds=seeds, effect=effect), names).values()))) - target
    effect = optimize.brentq(gap, 0.0, 2.0, xtol=1e-5)
    return Regime(f"planted effect = MDE (sigma={sigma:g})", sigma, seeds=seeds, effect=effect), target


def rule_pick(n: dict[str, int], replicates: int, seed: int = 0, sigma: float = 0.1, spread: float = 0.2) -> dict:
    """The weakest member's row when members differ (evenly over +-``spread`` logits) and the baseline equals the
    truly weakest member: how often the one-seed bootstrap said "the weakest member beats the baseline" (one-sided
    2.5%: its interval above 0, read as about the truly weakest member, a false claim), how far the cross-fit
    rule's pick sits above the truly weakest (its estimand: the mean of the unbiased cross-fit differences over
    the worlds), and how often the 3-seed interval covers that estimand."""
    r = Regime(f"weakest: members +-{spread:g} logit, baseline = the truly weakest (sigma={sigma:g})", sigma,
               seeds=3, spread=spread, baseline_shift=-spread)
    names = list(n)
    rng = np.random.default_rng([seed, 77])
    fired, deltas, intervals = [], [], []
    for _ in range(replicates):
        _, members, base, _ = simulate(rng, r, n)
        a = arms(members, base, weakest=True)
        weakest, baseline = [a["weakest"][b] for b in names], [a["baseline"][b] for b in names]
        one = stats.compare("weakest - baseline", [x[:1] for x in weakest], [x[:1] for x in baseline], seed=seed,
                            n_resamples=BOOT)
        fired.append(one.ci95[0] > 0)
        c = stats.seed_compare("weakest - baseline", weakest, baseline)
        deltas.append(c.delta)
        intervals.append(c.ci95)
    estimand = float(np.mean(deltas))
    covered = float(np.mean([lo <= estimand <= hi for lo, hi in intervals]))
    rate = float(np.mean(fired))
    return {"regime": r.name, "replicates": replicates,
            "before: one seed, 'weakest beats the baseline' (one-sided 2.5%)": {
                "rate": rate, "mc_error": mc_error(rate, replicates, 0.025), "nominal": 0.025},
            "rule's pick minus the truly weakest, pts": {
                "value": 100 * estimand, "mc_error": 100 * float(np.std(deltas, ddof=1) / np.sqrt(replicates))},
            "after: 3 seeds, interval covers the rule's pick": {
                "rate": covered, "mc_error": mc_error(covered, replicates, 0.95), "nominal": 0.95}}


def run(replicates: int = 200, seed: int = 0, before: bool = True, regimes=None, seeds_per_arm=(1, 3),
        n: dict[str, int] | None = None, with_power: bool = True, weakest: bool = True, progress=None,
        with_rule: bool = True, jobs: int = 1) -> dict:
    """The calibration table: {"regimes": {name: {"seeds=S": {claim: {rate, mc_error}}}}, "power": {...},
    "sizes": n, "replicates": R}. Each regime x seeds draws its worlds from one fixed seed."""
    n = n or sizes()
    table = {}
    tasks = [(i, replace(r, seeds=s), n, replicates, before, seed, weakest)
             for i, r in enumerate(regimes or REGIMES) for s in seeds_per_arm]
    done = W.parallel_map(_regime, tasks, jobs, progress,
                          lambda t: f"{t[1].name}, {t[1].seeds} seed(s) per arm: {replicates} worlds done")
    for t, summary in zip(tasks, done):
        summary["_regime"], summary["_index"] = asdict(t[1]), t[0]  # what drew it (``recheck`` draws it again)
        table.setdefault(t[1].name, {})[f"seeds={t[1].seeds}"] = summary
    out = {"replicates": replicates, "sizes": n, "regimes": table}
    if with_power:
        out["power"] = power_at_promised(n, max(max(seeds_per_arm), 2), replicates, seed)
    if with_rule and weakest:
        out["rule_pick"] = rule_pick(n, replicates, seed)
    return out


def power_at_promised(n: dict[str, int], seeds: int, replicates: int, seed: int) -> dict:
    """The share of ``replicates`` worlds with the promised MDE planted (``planted``) whose primary comparison
    rejects."""
    names = list(n)
    regime, target = planted(n, seeds=seeds)
    rng = np.random.default_rng([seed, 99])
    fires = []
    for _ in range(replicates):
        _, members, base, _ = simulate(rng, regime, n)
        a = arms(members, base, weakest=False)
        c = stats.seed_compare("overall", [a["population mean"][b] for b in names], [a["baseline"][b] for b in names])
        fires.append(c.p_value < ALPHA)
    rate = float(np.mean(fires))
    return {"regime": regime.name, "seeds": regime.seeds, "effect_logits": regime.effect, "mde_promised": target,
            "promised_power": power.POWER, "rate": rate, "mc_error": mc_error(rate, replicates, power.POWER)}


def recheck(table: dict, checks_: list[dict], factor: int = W.RECHECK, seed: int = 0, jobs: int = 1,
            progress=None) -> list[dict]:
    """``calibration_worlds.recheck`` for this table (``W.redraw``): each check outside its bound judged again on
    ``factor`` x its worlds of the same regime (kept in the table) from the independent stream ``seed +
    W.RECHECK_STREAM``, by ``checks``' rule on that estimate alone (the claims after only)."""
    again = seed + W.RECHECK_STREAM

    def task_of(c, reps):
        if c["claim"] == "power at the promised MDE":
            return ("power",), ("power", table["sizes"], int(table["power"]["seeds"]), reps, again)
        kept = table["regimes"][c["regime"]][c["seeds"]]
        return ((c["regime"], c["seeds"]),
                ("regime", kept["_index"], Regime(**kept["_regime"]), table["sizes"], reps, False, again, True))

    def judge(c, result, reps):
        sub = ({"replicates": reps, "regimes": {}, "power": result} if c["claim"] == "power at the promised MDE"
               else {"replicates": reps, "regimes": {c["regime"]: {c["seeds"]: result}}})
        return next(a for a in checks(sub) if a["claim"] == c["claim"])

    def label(t):
        return f"recheck: {t[2].name}: {t[4]} worlds done" if t[0] == "regime" else f"recheck: power: {t[3]} worlds done"

    return W.redraw(checks_, factor, table["replicates"], task_of, _regime_or_power, judge, jobs, progress, label)


def _regime_or_power(kind: str, *args):
    return _regime(*args) if kind == "regime" else power_at_promised(*args)


def _regime(i: int, rs: Regime, n: dict[str, int], replicates: int, before: bool, seed: int, weakest: bool) -> dict:
    """The summary of ``replicates`` worlds of regime ``rs`` (the ``i``-th), from its own fixed seed."""
    rng = np.random.default_rng([seed, i, rs.seeds])
    return summarize([replicate(rng, rs, n, before, seed, weakest) for _ in range(replicates)], list(n))


# ====================================================================== populora bench stats
CHECKS = (("after fires overall", "<="), ("after fires (mean of benchmarks)", "<="), ("after family fires", "<="),
          ("after headline >= 1", "<="), ("after method claim made", "<="), ("after adapters family fires", "<="),
          ("after covers overall", "~"), ("after arm covers overall", "~"), ("after covers (mean of benchmarks)", "~"),
          ("after adapters covers overall", "~"))


def checks(table: dict, tolerance: float = 1.0) -> list[dict]:
    """The Done-when checks of a ``run`` table: rates of claims <= nominal + ``tolerance`` MC errors, coverage
    within 0.93-0.97 +- ``tolerance`` MC errors (``calibration_worlds.COVERAGE``), power >= 0.8 - ``tolerance`` MC errors. The one-seed adapters'
    family rate is a false positive only without a seed effect (else the adapters do differ): checked there."""
    out = []
    for regime, by_seeds in table["regimes"].items():
        for seeds, claims in by_seeds.items():
            for claim, kind in CHECKS:
                if claim not in claims or (claim == "after adapters family fires" and "sigma=0 " not in regime + " "):
                    continue
                rate, err = claims[claim]["rate"], claims[claim]["mc_error"]
                nominal = 0.95 if kind == "~" else ALPHA
                ok = W.within("coverage" if kind == "~" else "rate", rate, err, nominal, tolerance)
                out.append({"regime": regime, "seeds": seeds, "claim": claim, "rate": rate, "mc_error": err,
                            "nominal": nominal, "ok": bool(ok), "replicates": table.get("replicates")})
    if "power" in table:
        p = table["power"]
        out.append({"regime": p["regime"], "seeds": f"seeds={p['seeds']}", "claim": "power at the promised MDE",
                    "rate": p["rate"], "mc_error": p["mc_error"], "nominal": p["promised_power"],
                    "ok": bool(W.within("power", p["rate"], p["mc_error"], p["promised_power"], tolerance)),
                    "replicates": table.get("replicates")})
    return out


def text(table: dict) -> str:
    """The table as fixed-width text: one line per regime x seeds x claim, before and after side by side."""
    lines = [f"{'regime':<24} {'seeds':<8} {'claim':<44} {'before':>14} {'after':>14}"]
    for regime, by_seeds in table["regimes"].items():
        for seeds, claims in by_seeds.items():
            names = list(dict.fromkeys(k.split(" ", 1)[1] for k in claims if not k.startswith("_")))
            for name in names:
                cells = []
                for when in ("before", "after"):
                    c = claims.get(f"{when} {name}")
                    cells.append(f"{c['rate']:.3f}+-{c['mc_error']:.3f}" if c else "")
                lines.append(f"{regime:<24} {seeds:<8} {name:<44} {cells[0]:>14} {cells[1]:>14}")
    if "rule_pick" in table:
        rp = table["rule_pick"]
        lines.append(f"{rp['regime']}: " + "; ".join(
            f"{k} {v['rate' if 'rate' in v else 'value']:.3f}+-{v['mc_error']:.3f}" for k, v in rp.items() if isinstance(v, dict)))
    if "power" in table:
        p = table["power"]
        lines.append(f"power: {p['regime']}, {p['seeds']} seeds per arm, MDE promised {100 * p['mde_promised']:.2f} pts "
                     f"overall ({p['effect_logits']:.3f} logits): rejected {p['rate']:.3f}+-{p['mc_error']:.3f} "
                     f"(promised {p['promised_power']:.2f})")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """``populora bench stats [--replicates R] [--worlds R] [--seed N] [--before] [--small-n] [--recheck K]
    [--json]``."""
    p = argparse.ArgumentParser(prog="populora bench stats", description=(
        "known-truth simulations of the verdict's claims through the platform's own statistics: false-positive "
        "rates (one and three seeds per arm), the family-wise rate, interval coverage and power at a planted "
        "effect, each with its Monte Carlo error; then the report as printed (verdict.build, sweep_report.build) "
        "in worlds of other generative models, and power at the MDE it prints (docs/evaluation.md)"))
    p.add_argument("--replicates", type=int, default=400, help="simulated worlds per regime and seeds (MC error ~ "
                   "sqrt(0.05 x 0.95 / R): 0.011 at 400)")
    p.add_argument("--worlds", type=int, default=200, help="worlds per other generative model and seeds, and per "
                   "power check (each runs the whole report: ~1-3 s a world); 0: leave them out")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulations (the same seed, the same table)")
    p.add_argument("--before", action="store_true", help="also the claims as the statistics made them before "
                   "(the problem and crossed bootstraps: slower, ~0.3 s per world)")
    p.add_argument("--small-n", action="store_true", help="instead: 3, 5, 10, 20 and 30 problems per benchmark at "
                   "accuracies near 0 and 1 (1, 3 and 5 seeds), through the report's functions: each claim's "
                   "false-positive rate and each interval's coverage (--replicates worlds each)")
    p.add_argument("--jobs", type=int, default=0, help="worker processes (0: one per CPU core); each regime draws "
                   "from its own fixed seed, so the table does not depend on it")
    p.add_argument("--recheck", type=int, default=W.RECHECK, metavar="K", help="each check outside its bound "
                   "is drawn again: K x its worlds of the same regime from an independent stream, judged by the same "
                   "rule (default %(default)s; 0: none). Chance alone puts ~10 exact claims of the table outside 1 "
                   "MC error; a claim that breaks its bound stays outside")
    p.add_argument("--json", action="store_true", help="last line: the table and its checks as one JSON object")
    args = p.parse_args(argv)
    if args.recheck < 0:
        p.error("--recheck must be >= 0 (0: no recheck)")
    if args.jobs < 0:
        p.error("--jobs must be >= 0 (0: one per CPU core)")
    jobs = args.jobs or os.cpu_count() or 1
    if args.replicates < 10:
        p.error("--replicates must be >= 10 (the Monte Carlo error of fewer says nothing)")
    if 0 < args.worlds < 10:
        p.error("--worlds must be 0 or >= 10 (the Monte Carlo error of fewer says nothing)")
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    rechecks = []
    if args.small_n:
        table = W.small_n(args.replicates, args.seed, progress=say, jobs=jobs)
        table["checks"] = W.checks(table, small_n=True)
        print(W.text(table), end="")
        if args.recheck:
            rechecks = W.recheck(table, table["checks"], args.recheck, args.seed, True, jobs, say)
    else:
        table = run(args.replicates, args.seed, before=args.before, progress=say, jobs=jobs)
        table["checks"] = checks(table)
        print(text(table), end="")
        if args.recheck:
            rechecks = recheck(table, table["checks"], args.recheck, args.seed, jobs, say)
        if args.worlds:
            table["worlds"] = W.run(args.worlds, args.seed, progress=say, jobs=jobs)
            worlds = W.checks(table["worlds"])
            table["checks"] += worlds
            print(W.text(table["worlds"]), end="")
            if args.recheck:
                rechecks += W.recheck(table["worlds"], worlds, args.recheck, args.seed, False, jobs, say)
    bad = [c for c in table["checks"] if not c["ok"]]
    table["chance_outside"] = W.chance_outside(table["checks"], small_n=args.small_n)
    table["evidence"] = W.evidence(table["checks"], small_n=args.small_n)
    found = [e for e in table["evidence"] if e["p_adjusted"] < ALPHA]
    print(f"checks: {len(table['checks']) - len(bad)} of {len(table['checks'])} within 1 MC error of their bound "
          "(rates <= 0.05, coverage 0.93-0.97, or >= 0.93 with --small-n; power >= 0.80; exact checks: none "
          "otherwise); were every claim exactly "
          f"at its nominal value (rate 0.05, coverage 0.95, power 0.80), chance alone would put "
          f"{table['chance_outside']:.1f} outside"
          + "".join(f"\n  outside: {c['regime']} {c['seeds']} {c['claim']}: {c['rate']:.3f} (nominal {c['nominal']})"
                    for c in bad), flush=True)
    if rechecks:
        table["rechecks"] = rechecks
        still = [r for r in rechecks if not r["ok"]]
        print(f"rechecks ({args.recheck}x the worlds of each, an independent stream; the same rule): "
              + "; ".join(f"{r['regime']} {r['seeds']} {r['claim']}: {r['first_rate']:.3f} -> {r['rate']:.3f}+-"
                          f"{r['mc_error']:.3f} over {r['replicates']} ({'within' if r['ok'] else 'outside'})"
                          for r in rechecks)
              + "\noutside on the table and on its recheck: "
              + (", ".join(f"{r['regime']} {r['seeds']} {r['claim']}" for r in still) if still else "none"), flush=True)
    first = table["evidence"][0] if table["evidence"] else None
    print(f"evidence that a claim breaks its bound (each check's exact one-sided test, Holm-adjusted over the "
          f"{len(table['checks'])} checks, adjusted p < {ALPHA}): "
          + (", ".join(f"{e['regime']} {e['seeds']} {e['claim']}: {e['rate']:.3f} (adjusted p {e['p_adjusted']:.2g})"
                       for e in found) if found else "none")
          + (f" (the smallest p: {first['p']:.2g}, {first['regime']} {first['seeds']} {first['claim']}; adjusted "
             f"{first['p_adjusted']:.2g})" if first and not found else ""), flush=True)
    if args.json:
        print(json.dumps(table))
    return 0
