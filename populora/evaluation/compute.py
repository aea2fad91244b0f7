"""The one compute figure of a population and its baseline: each arm's realised per-adapter spend (its run's
ledger, ``compute/per_adapter/*``: generated + trained tokens, training/compute/ledger.py), their ratio in tokens and in
FLOPs, and whether that is "compute-matched" (within ``TOLERANCE``; else the ratio, in words). The report, the
sweep report, Compare, ``populora runs`` and the verdict print these words and no other.

Tokens are the matched quantity (training/compute/budget.py trains a baseline to its population's tokens); FLOPs are
the plan's per-token costs applied to them: 2N per generated token, (4 + 2 kl) N per trained one (N, the base's
parameters, is the same for both arms and cancels in the ratio; prompts and attention are left out, as both arms
pay them alike per row).
"""

from __future__ import annotations

from populora.platform.store import runlayout as rl

TOLERANCE = 0.05  # per-adapter spend further apart than this: not compute-matched (the one threshold everywhere)
TOKENS = ("generated_tokens", "trained_tokens")


def per_adapter(metrics: dict) -> dict[str, float] | None:
    """{generated_tokens, trained_tokens, tokens} per adapter from a run's latest metrics; None before it logged any.

    >>> per_adapter({"compute/per_adapter/generated_tokens": 10.0, "compute/per_adapter/trained_tokens": 5.0})["tokens"]
    15.0
    >>> per_adapter({}) is None
    True
    """
    values = {q: metrics.get(rl.COMPUTE_PER_ADAPTER[q]) for q in TOKENS}
    if any(v is None for v in values.values()):
        return None
    out = {q: float(v) for q, v in values.items()}
    return out | {"tokens": out["generated_tokens"] + out["trained_tokens"]}


def flops(generated: float, trained: float, params: float = 1.0, kl_forward: float = 0.0) -> float:
    """FLOPs of those tokens at the plan's per-token costs (``params``: N; 1 gives FLOPs per parameter).

    >>> flops(100, 50, 1e6)
    400000000.0
    """
    return 2 * params * generated + (4 + 2 * kl_forward) * params * trained


def figure(population: dict, baseline: dict, kl_forward: float = 0.0, note: str = "") -> dict | None:
    """Both arms' per-adapter spend from their runs' metrics: {population, baseline (tokens), ratio (tokens),
    flops_ratio, matched, words}; None when either run has no ledger. ``note``: the baseline's
    ``populora.budget_matched`` (``matched_note``), said after the ratio: what it was matched to when its
    population did not finish.

    >>> f = figure({"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 100.0},
    ...            {"compute/per_adapter/generated_tokens": 150.0, "compute/per_adapter/trained_tokens": 146.0})
    >>> round(f["ratio"], 3), f["matched"], f["words"]
    (1.48, False, "not compute-matched: the baseline spent 1.48x the population's per-adapter compute (296 vs 200 generated + trained tokens; FLOPs 1.47x)")
    >>> figure({"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 100.0},
    ...        {"compute/per_adapter/generated_tokens": 98.0, "compute/per_adapter/trained_tokens": 104.0})["words"].split(" per-adapter")[0]
    "compute-matched: the baseline spent 1.01x the population's"
    """
    p, b = per_adapter(population), per_adapter(baseline)
    if p is None or b is None or not p["tokens"]:
        return None
    ratio = b["tokens"] / p["tokens"]
    fp = flops(p["generated_tokens"], p["trained_tokens"], kl_forward=kl_forward)
    flops_ratio = flops(b["generated_tokens"], b["trained_tokens"], kl_forward=kl_forward) / fp if fp else None
    return {"population": p["tokens"], "baseline": b["tokens"], "ratio": ratio, "flops_ratio": flops_ratio,
            "matched": abs(ratio - 1) <= TOLERANCE, "words": words(p["tokens"], b["tokens"], flops_ratio, note)}


def words(population: float, baseline: float, flops_ratio: float | None = None, note: str = "") -> str:
    """The figure in words: "compute-matched" only within ``TOLERANCE``, else "not compute-matched" and the ratio;
    ``note`` after it (``figure``).

    >>> words(474, 484, note="matched to the population's spend at its last logged step 3 of 4 (the population crashed)")
    "compute-matched: the baseline spent 1.02x the population's per-adapter compute (484 vs 474 generated + trained tokens); matched to the population's spend at its last logged step 3 of 4 (the population crashed)"
    """
    ratio = baseline / population
    head = "compute-matched" if abs(ratio - 1) <= TOLERANCE else "not compute-matched"
    extra = "" if flops_ratio is None else f"; FLOPs {flops_ratio:.2f}x"
    return (f"{head}: the baseline spent {ratio:.2f}x the population's per-adapter compute ({baseline:,.0f} vs "
            f"{population:,.0f} generated + trained tokens{extra})" + (f"; {note}" if note else ""))


def matched_note(tags: dict | None) -> str:
    """What a baseline run was matched to when its population did not finish (its ``populora.budget_matched``
    tag, training/compute/budget.py), "" otherwise."""
    return (tags or {}).get(rl.BUDGET_MATCHED, "") or ""


def kl_forward_of(params: dict) -> float:
    """The KL base forward's share of trained tokens from a run's params (``optim.kl_coef`` > 0: every token)."""
    try:
        return 1.0 if float(params.get("optim.kl_coef", 0) or 0) > 0 else 0.0
    except ValueError:
        return 0.0


def of_runs(population_run, baseline_run) -> dict | None:
    """``figure`` of two MLflow runs (their latest metrics and the population's KL setting)."""
    return figure(population_run.data.metrics, baseline_run.data.metrics, kl_forward_of(population_run.data.params),
                  matched_note(baseline_run.data.tags))
