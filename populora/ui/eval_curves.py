"""Pure helpers of the Arms race page's "Benchmarks during training" charts (importable, so doctests run)."""

from __future__ import annotations

from populora.platform.store import runlayout as rl


def setup_of(tags: dict) -> dict | None:
    """A run's in-training evaluation from its tags (None: the run does not evaluate during training).

    >>> setup_of({rl.EVAL_EVERY: "2", rl.EVAL_SUBSET: "gsm8k,mbpp_plus@20", rl.EVAL_SUBSET_SEED: "0", rl.KIND: "baseline"})
    {'every': '2', 'names': ['gsm8k', 'mbpp_plus'], 'limit': 20, 'seed': '0', 'kind': 'baseline'}
    >>> setup_of({rl.KIND: "population"}) is None
    True
    """
    if not tags.get(rl.EVAL_EVERY):
        return None
    names, limit = rl.parse_eval_subset(tags.get(rl.EVAL_SUBSET, ""))
    return {"every": tags[rl.EVAL_EVERY], "names": names, "limit": limit, "seed": tags.get(rl.EVAL_SUBSET_SEED, "?"),
            "kind": tags.get(rl.KIND)}


def subset_note(setup: dict[str, dict]) -> str:
    """What the curves are (a fixed subset, a monitor) and whether the runs scored the same problems.

    >>> s = {"every": "1", "names": ["gsm8k"], "limit": 20, "seed": "0", "kind": "population"}
    >>> subset_note({"population": s, "baseline": dict(s, every="2")}).split(". A monitor")[0]
    'In-training evaluation on a fixed subset: gsm8k, 20 items each (subset seed 0), every step (population), every 2 steps (baseline)'
    """
    def subset(s: dict) -> str:
        return f"{', '.join(s['names'])}, {s['limit']} items each (subset seed {s['seed']})"

    def every(s: dict) -> str:
        return "every step" if s["every"] == "1" else f"every {s['every']} steps"

    subsets = {subset(s) for s in setup.values()}
    if len(subsets) == 1:
        parts = [next(iter(subsets))] + [f"{every(s)} ({label})" for label, s in setup.items()]
    else:
        parts = [f"{label}: {subset(s)}, {every(s)}" for label, s in setup.items()]
    return ("In-training evaluation on a fixed subset: " + ", ".join(parts) + ". A monitor, not the final "
            "evaluation: small subsets are noisy, and the weakest member is picked on the same problems it is "
            "scored on. Mean and weakest are over the members alive at each step.")
