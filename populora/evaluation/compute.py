"""The one compute figure of a population and its baseline: each arm's realised per-adapter spend (its run's
ledger, ``compute/per_adapter/*``: generated + trained tokens, training/compute/ledger.py), their ratio in tokens and in
FLOPs, and whether that is "compute-matched" (within ``TOLERANCE``; else the ratio, in words). The report, the
sweep report, Compare, ``populora runs`` and the verdict print these words and no other.

Tokens are the matched quantity (training/compute/budget.py trains a baseline to its population's tokens); FLOPs are
the plan's per-token costs applied to them: 2N per generated token, (4 + 2 kl) N per trained one (N, the base's
parameters, is the same for both arms and cancels in the ratio; prompts and attention are left out, as both arms
pay them alike per row). Two runs on different base models (a tiny random model against the embedded one) are
never "compute-matched": their FLOPs ratio uses each model's N (``platform.plan``'s architecture), or is not
given where one is unknown; their token ratio is said to be of different models.
"""

from __future__ import annotations

from populora.platform import plan
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


def model_of(params: dict) -> str:
    """A run's base model as lists name it, from its params (a tiny random run: "tiny random model shaped like X").

    >>> model_of({"model.base": "embedded", "model.tiny_random": "True"}), model_of({"model.base": "embedded"})
    ('tiny random model shaped like embedded', 'embedded')
    """
    return rl.base_model_label(str(params.get(rl.PARAM_BASE_MODEL, "?")), params)


def size_of(params: dict) -> float | None:
    """N, the base model's parameters, from a run's params (``plan.find_architecture``: its config.json, the HF
    cache, the shipped table); None for a tiny random model or an architecture not known here."""
    if str(params.get(rl.PARAM_TINY_RANDOM, "")).lower() == "true" or not params.get(rl.PARAM_BASE_MODEL):
        return None
    try:
        return float(plan.find_architecture(str(params[rl.PARAM_BASE_MODEL]))[0].params())
    except (plan.PlanError, OSError, ValueError, TypeError):
        return None


def figure(population: dict, baseline: dict, kl_forward: float = 0.0, note: str = "",
           models: tuple[dict, dict] | None = None) -> dict | None:
    """Both arms' per-adapter spend from their runs' metrics: {population, baseline (tokens), ratio (tokens),
    flops_ratio, flops (population, baseline: FLOPs per adapter, per base parameter when the base is shared),
    matched, words}; None when either run has no ledger. ``note``: the baseline's ``populora.budget_matched``
    (``matched_note``), said after the ratio: what it was matched to when its population did not finish.
    ``models``: the two runs' params; on different base models (both known) never matched, FLOPs from each model's
    N or none.

    >>> f = figure({"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 100.0},
    ...            {"compute/per_adapter/generated_tokens": 150.0, "compute/per_adapter/trained_tokens": 146.0})
    >>> round(f["ratio"], 3), f["matched"], f["words"]
    (1.48, False, "not compute-matched: the baseline spent 1.48x the population's per-adapter compute (296 vs 200 generated + trained tokens; FLOPs 1.47x)")
    >>> figure({"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 100.0},
    ...        {"compute/per_adapter/generated_tokens": 98.0, "compute/per_adapter/trained_tokens": 104.0})["words"].split(" per-adapter")[0]
    "compute-matched: the baseline spent 1.01x the population's"
    >>> g = figure({"compute/per_adapter/generated_tokens": 100.0, "compute/per_adapter/trained_tokens": 100.0},
    ...            {"compute/per_adapter/generated_tokens": 98.0, "compute/per_adapter/trained_tokens": 104.0},
    ...            models=({"model.base": "embedded"}, {"model.base": "embedded", "model.tiny_random": "True"}))
    >>> g["matched"], g["flops_ratio"], g["words"]
    (False, None, 'not comparable: different base models (embedded vs tiny random model shaped like embedded); the baseline generated and trained 1.01x the tokens per adapter (202 vs 200), tokens of different models; FLOPs not compared (the parameter count of tiny random model shaped like embedded is not known)')
    """
    p, b = per_adapter(population), per_adapter(baseline)
    if p is None or b is None or not p["tokens"]:
        return None
    ratio = b["tokens"] / p["tokens"]
    # both runs' base models known (a run planted or from before the param says nothing: no claim either way)
    known = models and all(m.get(rl.PARAM_BASE_MODEL) for m in models)
    names = (model_of(models[0]), model_of(models[1])) if known else None
    if names and names[0] != names[1]:
        sizes = (size_of(models[0]), size_of(models[1]))
        fl = ([flops(x["generated_tokens"], x["trained_tokens"], n, kl_forward) for x, n in zip((p, b), sizes)]
              if None not in sizes else None)
        flops_ratio = fl[1] / fl[0] if fl and fl[0] else None
        unknown = next((name for name, n in zip(names, sizes) if n is None), None)
        text = (f"not comparable: different base models ({names[0]} vs {names[1]}); the baseline generated and "
                f"trained {ratio:.2f}x the tokens per adapter ({b['tokens']:,.0f} vs {p['tokens']:,.0f}), tokens of "
                f"different models; " + (f"FLOPs {flops_ratio:.2f}x (each model's parameters)" if flops_ratio else
                                         f"FLOPs not compared (the parameter count of {unknown} is not known)"))
        return {"population": p["tokens"], "baseline": b["tokens"], "ratio": ratio, "flops_ratio": flops_ratio,
                "flops": fl, "flops_unit": "FLOPs", "matched": False, "words": text + (f"; {note}" if note else "")}
    fp = flops(p["generated_tokens"], p["trained_tokens"], kl_forward=kl_forward)
    fb = flops(b["generated_tokens"], b["trained_tokens"], kl_forward=kl_forward)
    flops_ratio = fb / fp if fp else None
    return {"population": p["tokens"], "baseline": b["tokens"], "ratio": ratio, "flops_ratio": flops_ratio,
            "flops": [fp, fb], "flops_unit": "FLOPs per base parameter",
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
                  matched_note(baseline_run.data.tags), (population_run.data.params, baseline_run.data.params))
