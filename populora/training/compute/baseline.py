"""The compute-matched single-agent baseline of a population: one rule, used by Launch, ``populora sweep
--baseline`` and ``populora train --baseline``.

The paper compares a population with a single agent trained on the same compute *per adapter*. With
``population.single_agent`` the loop's one adapter (B0) plays both roles: it proposes ``tasks_per_teacher`` tasks
and answers each of them itself (``answers_per_task``, else ``rollouts`` times), and with ``solver.data: buffer``
it trains on ``batch_per_kind`` buffer tasks per kind. So "the same config with single_agent=true" gives B0 a
whole teacher's proposals *and* a whole student's answers (2x the population's per-adapter tokens on
configs/smoke.yaml). The rule divides the population's rows per step (``workload.counts``, what ``populora
plan`` accounts) by its adapters and gives the baseline that many of each kind:

    tasks_per_teacher       = population proposals / adapters
    answers per task        = population answers / adapters / tasks_per_teacher   (rollouts or answers_per_task)
    solver.batch_per_kind   = population buffer answers / adapters / kinds        (solver.data: buffer)

in whole numbers (at least 1): where the population's rows per adapter are not whole (3 teachers x 2 tasks over 8
adapters: 0.75 proposals), the pair of whole numbers whose per-adapter generated and trained tokens (the plan's
token budgets) come closest to the population's. Token budgets, the model and everything else stay the
population's. configs/baseline.yaml (of smoke.yaml) and configs/paper-baseline.yaml (of every paper-*.yaml
population) are this rule's output.

That is the baseline's *shape*, not how long it trains: equal rows per step are equal tokens only if both arms
write the same share of valid tasks at the same completion lengths, and they do not (an invalid task is never
answered; issue 53 measured 1.48x). So the matched baseline trains to a compute budget (training/compute/budget.py,
``budget.population``): until its realised per-adapter ledger equals its population's final one, within 5%,
following the population while it still trains; ``steps`` is only a cap (``budget.matched_steps_cap``).
"""

from __future__ import annotations

import math

from populora.platform import plan
from populora.training.compute.budget import matched_steps_cap
from populora.training.config import TrainConfig
from populora.training.compute.workload import counts, solver_batch_rows, workload


def per_adapter_rows(cfg: TrainConfig) -> dict[str, float]:
    """Expected rows per adapter and step: proposals, answers that estimate solve rates (trained on unless
    solver.data is buffer), and buffer answers (solver.data: buffer).

    >>> from populora.platform import config as config_io
    >>> per_adapter_rows(config_io.load(TrainConfig, "configs/smoke.yaml", []))
    {'propose': 1.0, 'answers': 4.0, 'buffer': 0.0}
    """
    c = counts(cfg)
    n = c["adapters"]
    return {"propose": c["propose_rows"] / n, "answers": c["solve_rows"] / n, "buffer": solver_batch_rows(cfg) / n}


def matched_baseline(cfg: TrainConfig) -> TrainConfig:
    """The single-agent config with ``cfg``'s per-adapter rows per step (see the module's rule); a baseline
    config is returned as it is (it is its own baseline).

    >>> from populora.platform import config as config_io
    >>> b = matched_baseline(config_io.load(TrainConfig, "configs/smoke.yaml", []))
    >>> b.population.single_agent, b.tasks.tasks_per_teacher, b.tasks.rollouts, b.evolution.every, b.name
    (True, 1, 4, 0, 'smoke-baseline')
    >>> b.budget.population, b.steps  # trained to its population's ledger; 4 steps of smoke.yaml -> a cap
    (True, 40)
    """
    if cfg.population.single_agent:
        return cfg.model_copy(deep=True)
    rows = per_adapter_rows(cfg)
    data = cfg.model_dump(mode="json", exclude_unset=True)
    data["name"] = f"{cfg.name}-baseline"
    data["baseline_run"] = None
    data.setdefault("population", {})["single_agent"] = True
    data.setdefault("evolution", {})["every"] = 0  # one adapter: nothing to select or replace
    data["budget"] = {"population": True}  # how long: until its ledger matches its population's (budget.py)
    data["steps"] = matched_steps_cap(cfg.steps)
    if rows["buffer"]:
        data.setdefault("solver", {})["batch_per_kind"] = max(1, round(rows["buffer"] / len(cfg.tasks.kinds)))
    base = TrainConfig.model_validate(data)
    tasks, answers = _closest(base, tokens_per_adapter(cfg), rows)
    t = data.setdefault("tasks", {})
    t["tasks_per_teacher"] = tasks
    t["answers_per_task" if cfg.tasks.answers_per_task is not None else "rollouts"] = answers
    return TrainConfig.model_validate(data)


def too_small(cfg: TrainConfig) -> str | None:
    """Why the population ``cfg`` may be too small to compute-match at all, in words (None: it is not): a
    baseline step is at least one proposal, and where few of the population's tasks are valid (few answers: a
    small or random model) its per-adapter spend is about its proposals per adapter. Under one proposal per
    adapter over the whole run, that is less than one baseline step, and the ledger-matched baseline cannot end
    nearer than its smallest step (the baseline's budget and the compute figure then say so).

    >>> from populora.platform import config as config_io
    >>> too_small(config_io.load(TrainConfig, "configs/smoke.yaml", [])) is None
    True
    >>> too_small(config_io.load(TrainConfig, "configs/smoke.yaml", ["steps=1", "tasks.tasks_per_teacher=1"]))[:88]
    'may be too small to compute-match: its adapters write 0.5 proposals each over its 1 step'
    """
    if cfg.population.single_agent:
        return None
    per_step = per_adapter_rows(cfg)["propose"]
    whole = per_step * cfg.steps
    if whole >= 1:
        return None
    need = math.ceil(1 / per_step - 1e-9)
    return (f"may be too small to compute-match: its adapters write {whole:g} proposals each over its {cfg.steps} "
            f"step{'s' if cfg.steps != 1 else ''} and the baseline's smallest step is one proposal, so where few of "
            f"its tasks are valid the baseline spends up to {1 / whole:.1f}x the population's per-adapter compute "
            f"whatever it does; give it steps >= {need} (or more tasks per teacher)")


def tokens_per_adapter(cfg: TrainConfig) -> tuple[float, float]:
    """(generated, trained) tokens per adapter and step by the plan's accounting (token budgets, every task valid).

    >>> from populora.platform import config as config_io
    >>> tokens_per_adapter(config_io.load(TrainConfig, "configs/smoke.yaml", []))
    (320.0, 2220.0)
    """
    w = workload(cfg)
    generated = w.propose_rows * w.propose_new + w.solve_rows * w.solve_new
    trained = sum(r * w.trained_len(p, new) for r, p, new in plan.trained_rows(w))
    return generated / w.adapters, trained / w.adapters


def _closest(base: TrainConfig, target: tuple[float, float], rows: dict[str, float]) -> tuple[int, int]:
    """(tasks per step, answers per task) of the single agent ``base`` whose per-adapter tokens are closest to
    ``target`` (the larger of the two log-ratios, generated and trained, smallest), among the whole numbers next
    to the population's rows per adapter."""
    limit = 256 if base.tasks.answers_per_task is not None else 64  # the fields' bounds
    guess = rows["propose"]
    best, best_err = (1, 1), math.inf
    for tasks in sorted({max(1, math.floor(guess)), max(1, math.ceil(guess))}):
        ideal = rows["answers"] / tasks
        for answers in sorted({max(1, min(limit, a)) for a in range(math.floor(ideal) - 1, math.ceil(ideal) + 2)}):
            trial = base.model_copy(deep=True)
            trial.tasks.tasks_per_teacher = tasks
            if base.tasks.answers_per_task is not None:
                trial.tasks.answers_per_task = answers
            else:
                trial.tasks.rollouts = answers
            err = max(abs(math.log(max(m, 1e-9) / max(t, 1e-9))) for m, t in zip(tokens_per_adapter(trial), target))
            if err < best_err - 1e-12:
                best, best_err = (tasks, answers), err
    return best
