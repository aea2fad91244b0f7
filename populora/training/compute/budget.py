"""A compute budget as the stopping rule: train until the run's per-adapter ledger reaches a target, not for a
number of steps (``budget.*`` in the config; ``steps`` is then only a cap).

**The quantity matched** is the ledger's per-adapter generated + trained tokens (``compute/per_adapter/
generated_tokens`` + ``trained_tokens``, ledger.py: completion tokens the adapter sampled and completion tokens its
update trained on, measured from the rollouts). Both arms share the base model, so FLOPs are the same per-token
costs times these counts (evaluation/compute.flops: 2N per generated token, 4N per trained one, +2N with the KL's
base forward): tokens are what was measured, FLOPs an estimate from the plan's per-token costs, and the one compute
figure (evaluation/compute.py) reports both.

**The target** (``budget.tokens``, ``budget.run`` or ``budget.population``): a number; the ledger of a run read
from MLflow; or the ledger of this run's population (the run sharing its ``pair``, else its sweep seed's
population runs, the largest). A target run that still trains is *followed*: this run takes a full step only
when even its largest likely spend stays under that run's ledger as it stands, and otherwise waits for it
(``budget.poll_s``); once that run has ended its ledger is final. A followed run that ends without finishing (failed,
stopped, or *crashed*: killed outright, its status still RUNNING but its heartbeat older than the readers' limit,
platform/jobs/heartbeat.py) is final too: this run stops waiting and matches that run's last logged ledger, and says so
(one line in its log, its ``populora.budget_matched`` tag: "matched to the population's spend at its last logged
step 3 of 4 (the population crashed ...)", which the one compute figure prints beside its ratio); one that ends
before logging any step leaves nothing to match, and this run ends FAILED with ``BudgetError`` saying so. So
does a population whose job ended before it ever created its run (a bad config, stopped while queued: its job
found from this run's, population_job.py); while that job is queued or running this run waits for it, and where
no job of the population is known (started by hand, this run outside a local job) it waits as for any run.

**Before the first step** nothing is measured: the config's step is taken unless even its bound (every task valid,
every completion at its token budget) would spend more than 3x what is left. The bound is far above what a step
spends (completions stop before their budgets, tasks are invalid: 640 against the 96-118 the smoke baseline's
first steps spent), and a baseline matched to a population that trained N steps has about N of its own steps to
take, so its first step keeps the config's shape rather than starting on cut completions.

**Granularity.** A step's spend is lumpy: at 25% validity a one-task step spends a proposal or a proposal and
all its answers. So the rule is: before each step, with R = target - spent per adapter, stop if R is within
``tolerance``/2 of the target; else take the largest *shape* (tasks per teacher t' <= t, answers per task
a' <= a, buffer batch b' scaled with t'a') whose worst case (every task valid, completions of the lengths seen
so far) ends inside target + tolerance/2, so no step can overshoot the band; if even the smallest shape cannot,
take it only if its expected spend lands nearer the target than stopping does (or if nothing was spent yet: a
budgeted run trains at least one step). The per-step shape of the
config is the shape of every step but the last few, which have fewer rows; every row is still a whole rollout.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

from populora.evaluation.compute import TOKENS, per_adapter  # the matched quantity: generated + trained, per adapter
from populora.platform.jobs import heartbeat
from populora.platform.store import runlayout as rl
from populora.platform.jobs import stopping
from populora.platform.store import sweep as S
from populora.training.config import TrainConfig
from populora.training.compute.population_job import PopulationJob
from populora.training.compute.workload import counts, solver_batch_rows

WAIT = "wait"  # next_shape's answer while a followed run's ledger is not far enough ahead
ENDED = ("FINISHED", "FAILED", "KILLED")  # MLflow statuses after which a run's ledger no longer changes
BY_MLFLOW = {"FINISHED": rl.FINISHED, "FAILED": rl.FAILED, "KILLED": rl.STOPPED}
UNFINISHED = {rl.FAILED: "failed", rl.STOPPED: "was stopped", heartbeat.CRASHED: "crashed"}  # final, short of its end


class BudgetError(RuntimeError):
    """The target cannot be matched (a followed run ended before logging any spend, or the population's job ended
    before starting its run): the run ends FAILED with it."""


# ---------------------------------------------------------------------------------------------- the target
@dataclass
class Target:
    tokens: float | None  # None: the target run has not logged a step yet
    final: bool           # False: a run that still trains (its ledger will grow)
    source: str           # in words, for logs and the run's tag
    note: str = ""        # the target run ended short of its end (crashed, failed, stopped): what is matched, in words
    started: bool = True  # False: no target run exists yet (the population's job may still start it)


def state(run, now: float | None = None) -> str:
    """A target run's state: running, finished, failed, stopped, or crashed (running in the store, its heartbeat
    older than the readers' limit: ``heartbeat.shown_status``, the one definition ``populora runs`` shows)."""
    shown = heartbeat.shown_status(run.data.tags.get(rl.STATUS, run.info.status.lower()), run.data.tags, now)
    if shown == rl.RUNNING and run.info.status in ENDED:  # MLflow says ended, our tag was never updated
        return BY_MLFLOW[run.info.status]
    return shown


def read_target(cfg: TrainConfig, tracker=None, run_id: str | None = None, now: float | None = None) -> Target:
    """The budget's target now (``cfg.budget``); ``tracker`` and ``run_id`` (this run) to read MLflow; ``now``
    the clock a heartbeat's age is read against (default: time.time())."""
    b = cfg.budget
    if b.tokens:
        return Target(float(b.tokens), True, f"budget.tokens={b.tokens:g}")
    runs = [tracker.get_run(b.run)] if b.run else population_runs(tracker, cfg, run_id)
    what = f"run {b.run}" if b.run else "the population"
    if not runs:
        return Target(None, False, f"{what} (not started yet)", started=False)
    values = [(per_adapter(r.data.metrics) or {}).get("tokens") for r in runs]
    states = [state(r, now) for r in runs]
    final = all(s != rl.RUNNING for s in states)
    ids = ", ".join(f"{r.info.run_id} ({s})" for r, s in zip(runs, states))
    if any(v is None for v in values):
        return Target(None, final, f"{what}: {ids}, no step logged yet")
    top = max(range(len(runs)), key=lambda i: values[i])
    note = unfinished_note(tracker, runs[top], states[top], what, now) if final else ""
    return Target(max(values), final, f"the per-adapter ledger of {'run ' if len(runs) == 1 else 'runs '}{ids}", note)


def unfinished_note(tracker, run, run_state: str, what: str, now: float | None = None) -> str:
    """What a target run that ended short of its end is matched at, in words ("" for a finished run): its last
    logged step (metrics reach MLflow at each checkpoint, so a crashed run's last logged step may be behind the
    step it was on) and how it ended."""
    if run_state not in UNFINISHED:
        return ""
    history = tracker.client.get_metric_history(run.info.run_id, rl.COMPUTE_PER_ADAPTER[TOKENS[0]])
    step = max((m.step for m in history), default=None)
    steps = rl.to_int(run.data.params.get(rl.PARAM_STEPS))
    how = UNFINISHED[run_state]
    if run_state == heartbeat.CRASHED:
        silent = heartbeat.silence(run.data.tags, now) or 0.0
        how += f": no heartbeat for {heartbeat.describe_silence(silent)}, limit {heartbeat.limit_s():.0f} s"
    at = f"its last logged step {step}" + (f" of {steps}" if steps else "") if step is not None else "its last logged step"
    whose = "the population's" if what == "the population" else f"{what}'s"
    return f"matched to {whose} spend at {at} ({what} {how}, run {run.info.run_id})"


SHORT_MATCH = "matched to the population's spend at"  # the start of a note on a baseline matched short of its end


def baseline_to_extend(tracker, population_run_id: str) -> str | None:
    """The population's linked baseline (``populora.baseline_run``) if it ended matched to the population's spend
    when the population had stopped short of its end (its ``populora.budget_matched`` note says so), else None.
    Such a baseline is resumable: resumed once the population has trained on, its budget re-reads the target (now
    the population's final ledger) and it trains on to it (a resumable baseline, not a new one)."""
    pop = tracker.get_run(population_run_id)
    linked = pop.data.tags.get(rl.BASELINE_RUN)
    if not linked or pop.data.tags.get(rl.KIND) != rl.POPULATION:
        return None
    try:
        base = tracker.get_run(linked)
    except Exception:  # noqa: BLE001 - a deleted baseline: nothing to extend
        return None
    ended = base.data.tags.get(rl.STATUS) in (rl.FINISHED, rl.STOPPED, rl.FAILED)
    return linked if ended and base.data.tags.get(rl.BUDGET_MATCHED, "").startswith(SHORT_MATCH) else None


def stop_words(baseline_run: str | None, baseline_status: str | None) -> str:
    """What a Stop of a population does to its linked baseline, in words ("" with none)."""
    if not baseline_run:
        return ""
    if baseline_status in (rl.FINISHED,):
        return (f" Its linked baseline {baseline_run[:8]} has ended: a Resume of this population extends it to the "
                "population's final spend.")
    return (f" Its linked baseline {baseline_run[:8]} matches the population's spend as it stands when it runs: "
            "resume the population and the baseline is extended to its final spend (until then its ratio says it was "
            "matched to the population's spend at its last logged step).")


def unmatchable(target: Target, run_id: str | None) -> str:
    """Why a target that ended before logging any step cannot be matched, and what to do."""
    again = f"start this baseline again (run {run_id} did not train)" if run_id else "start this run again"
    return (f"cannot match the compute of {target.source}; it ended before logging any step, so there is no "
            f"per-adapter spend to match; resume it once it can train (populora train --resume RUN, a crashed or "
            f"failed run) and {again}, or give this run a number: --set budget.tokens=N")


def population_runs(tracker, cfg: TrainConfig, run_id: str | None) -> list:
    """This baseline's population: the parent run of kind population sharing its ``pair``, else the population
    runs of its sweep seed (one per planned key: the finished one, else the newest)."""
    client = tracker.client
    exps = [e.experiment_id for e in client.search_experiments()]
    if not exps:
        return []
    if cfg.pair:
        found = client.search_runs(exps, filter_string=f"tags.`{rl.PAIR}` = '{cfg.pair}'", max_results=50,
                                   order_by=["attributes.start_time DESC"])
        pops = [r for r in found if r.data.tags.get(rl.KIND) == rl.POPULATION and rl.PARENT not in r.data.tags]
        return pops[:1]
    tags = tracker.get_run(run_id).data.tags if run_id else {}
    sweep, seed = tags.get(rl.SWEEP), tags.get(rl.SWEEP_SEED)
    if not sweep:
        return []
    runs = S.latest_by_key(S.find_runs(client, sweep)).values()
    return [r for r in runs if r.data.tags.get(rl.SWEEP_SEED) == seed and r.data.tags.get(rl.KIND) == rl.POPULATION]


# ---------------------------------------------------------------------------------------------- the cost model
# (tasks per teacher, answers per task, buffer batch per kind (0 without solver.data buffer), proposal and answer
# token budgets)
Shape = tuple[int, int, int, int, int]
MIN_BUDGETS = (16, 8)
PRIOR_SLACK = 3  # before any step: the config's step unless its bound exceeds 3x what is left (see the module)
KNOWN_ROWS = 8  # rows of a kind seen before its longest stands for its worst case (else its token budget does)  # the fields' lower bounds (tasks.max_new_tokens_propose, tasks.max_new_tokens_solve)


def full_shape(cfg: TrainConfig) -> Shape:
    tc = cfg.tasks
    return (tc.tasks_per_teacher, tc.answers_per_task if tc.answers_per_task is not None else tc.rollouts,
            cfg.solver.batch_per_kind if cfg.solver.data == "buffer" else 0, tc.max_new_tokens_propose,
            tc.max_new_tokens_solve)


def with_shape(cfg: TrainConfig, shape: Shape) -> TrainConfig:
    """``cfg`` with a step's rows set to ``shape`` (the config itself when it is its own shape)."""
    if shape == full_shape(cfg):
        return cfg
    out = cfg.model_copy(deep=True)
    out.tasks.tasks_per_teacher = shape[0]
    if cfg.tasks.answers_per_task is not None:
        out.tasks.answers_per_task = shape[1]
    else:
        out.tasks.rollouts = shape[1]
    if shape[2]:
        out.solver.batch_per_kind = shape[2]
    out.tasks.max_new_tokens_propose, out.tasks.max_new_tokens_solve = shape[3], shape[4]
    return out


def shapes(full: Shape) -> list[Shape]:
    """Every smaller shape, largest first: fewer tasks and answers at the config's token budgets (the buffer
    batch scaled with the answered share; at most 32 values per axis), then the one-task one-answer step at
    smaller token budgets (down to the fields' bounds), for a last step smaller than a row.

    >>> shapes((1, 4, 0, 128, 48))[:5]
    [(1, 4, 0, 128, 48), (1, 3, 0, 128, 48), (1, 2, 0, 128, 48), (1, 1, 0, 128, 48), (1, 1, 0, 120, 45)]
    >>> shapes((1, 4, 0, 128, 48))[-1]
    (1, 1, 0, 16, 8)
    """
    def axis(n: int) -> list[int]:
        return list(range(n, 0, -1)) if n <= 32 else sorted({max(1, round(n * k / 32)) for k in range(1, 33)}, reverse=True)
    t, a, b, bp, bs = full
    rows = [(tt, aa, max(1, round(b * tt * aa / (t * a))) if b else 0, bp, bs) for tt in axis(t) for aa in axis(a)]
    rows = sorted(set(rows), key=lambda s: (-s[0] * s[1], -s[0]))
    one = rows[-1]
    shorter = [one[:3] + (max(MIN_BUDGETS[0], round(bp * k / 16)), max(MIN_BUDGETS[1], round(bs * k / 16)))
               for k in range(15, 0, -1)]
    return rows + [s for s in dict.fromkeys(shorter) if s != one]


@dataclass
class CostModel:
    """What rows cost per adapter, measured from this run's steps (sums): proposals, answers and buffer-batch
    rows with their tokens (generated + trained), valid tasks, the shapes they came from, and the ledger's
    realised spend against the model's (a calibration: the ledger is the truth)."""

    proposals: float = 0.0
    proposal_tokens: float = 0.0
    answers: float = 0.0
    answer_tokens: float = 0.0
    batch: float = 0.0
    batch_tokens: float = 0.0
    valid_x_answers: float = 0.0  # sum over steps of valid tasks x answers per task of the step's shape
    tasks_units: float = 0.0      # sum of t' (proposals per unit of tasks per teacher)
    batch_units: float = 0.0      # sum of b'
    realised: float = 0.0
    modelled: float = 0.0
    valid: float = 0.0
    steps: int = 0
    longest: list = field(default_factory=lambda: [0.0, 0.0, 0.0])  # the costliest proposal, answer, batch row seen
    answer_factor: float = 2.0  # tokens counted per answer token: generated and trained (1: estimation answers only)
    # per kind, the smallest token budget a row of it was cut at (0: none cut): the longest seen is then only a
    # lower bound of what a larger budget lets a row cost
    cut_at: list = field(default_factory=lambda: [0, 0, 0])
    prior: bool = field(default=False, repr=False)

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> "CostModel":
        """The model before any step: every task valid, every completion at its token budget (the plan's bound)."""
        c, (t, a, b, _, _), tc = counts(cfg), full_shape(cfg), cfg.tasks
        trained = 2 if cfg.solver.data != "buffer" else 1
        batch = solver_batch_rows(cfg)
        return cls(c["propose_rows"], c["propose_rows"] * 2 * tc.max_new_tokens_propose, c["solve_rows"],
                   c["solve_rows"] * trained * tc.max_new_tokens_solve, batch, batch * 2 * tc.max_new_tokens_solve,
                   c["propose_rows"] * a, t, b, 0.0, 0.0, c["propose_rows"], 0,
                   [2.0 * tc.max_new_tokens_propose, trained * tc.max_new_tokens_solve, 2.0 * tc.max_new_tokens_solve], prior=True)

    def observe(self, shape: Shape, tasks, proposals, answers, batch, answers_trained: bool, realised: float,
                adapters: int) -> None:
        """Add one step (its rows and the ledger's per-adapter spend of it); the first replaces the prior."""
        if self.prior:
            self.__dict__.update(asdict(CostModel()))
            self.prior = False
        row = lambda rs, trained: sum(len(r.completion_ids) * (2 if trained else 1) for r in rs)  # noqa: E731
        self.answer_factor = 2.0 if answers_trained else 1.0
        budgets = (shape[3], shape[4], shape[4])
        for i, (rs, trained) in enumerate(((proposals, True), (answers, answers_trained), (batch, True))):
            self.longest[i] = max([self.longest[i]] + [len(r.completion_ids) * (2 if trained else 1) for r in rs])
            if any(len(r.completion_ids) >= budgets[i] for r in rs):
                self.cut_at[i] = min(self.cut_at[i] or budgets[i], budgets[i])
        valid = sum(bool(t.valid) for t in tasks)
        self.proposals += len(proposals)
        self.proposal_tokens += row(proposals, True)
        self.answers += len(answers)
        self.answer_tokens += row(answers, answers_trained)
        self.batch += len(batch)
        self.batch_tokens += row(batch, True)
        self.valid += valid
        self.valid_x_answers += valid * shape[1]
        self.tasks_units += shape[0]
        self.batch_units += shape[2]
        self.realised += realised
        self.modelled += (row(proposals, True) + row(answers, answers_trained) + row(batch, True)) / adapters
        self.steps += 1

    def spend(self, shape: Shape, adapters: int, worst: bool = False) -> float:
        """Per-adapter tokens a step of ``shape`` is expected to spend (``worst``: every task valid, every row as
        long as the longest of its kind seen so far, or at its token budget while fewer than ``KNOWN_ROWS`` of its
        kind were seen); a row never costs more than its token budget allows."""
        caps = (2.0 * shape[3], self.answer_factor * shape[4], 2.0 * shape[4])
        budgets = (shape[3], shape[4], shape[4])
        known = lambda rows, i: rows >= KNOWN_ROWS and not (self.cut_at[i] and budgets[i] > self.cut_at[i])  # noqa: E731
        if worst:  # the longest row seen, once enough of its kind were seen uncut at this budget; else the budget
            mean = lambda tokens, rows, i: min(self.longest[i], caps[i]) if known(rows, i) else caps[i]  # noqa: E731
        else:
            mean = lambda tokens, rows, i: min(tokens / rows, caps[i]) if rows else 0.0  # noqa: E731
        proposals = self.proposals / max(self.tasks_units, 1) * shape[0]
        validity = 1.0 if worst or not self.proposals else self.valid / self.proposals
        per_valid = self.answers / self.valid_x_answers if self.valid_x_answers else 0.0  # answers per valid task per a
        if worst and not self.valid_x_answers:
            per_valid = 1.0  # no valid task seen yet: assume each is answered a' times
        answers = proposals * validity * per_valid * shape[1]
        batch = self.batch / max(self.batch_units, 1) * shape[2]
        answer_cost = mean(self.answer_tokens, self.answers, 1) or caps[1]
        tokens = (proposals * mean(self.proposal_tokens, self.proposals, 0) + answers * answer_cost
                  + batch * mean(self.batch_tokens, self.batch, 2))
        calibration = self.realised / self.modelled if self.modelled else 1.0
        return tokens / max(adapters, 1) * calibration

    def to_dict(self) -> dict:
        return asdict(self) | {"prior": self.prior}

    @classmethod
    def from_dict(cls, data: dict) -> "CostModel":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


# ---------------------------------------------------------------------------------------------- the rule
def next_shape(full: Shape, model: CostModel, spent: float, target: Target, tolerance: float,
               adapters: int) -> Shape | str | None:
    """The next step's shape, ``WAIT`` (a followed run must get further ahead first) or None (stop: the spend is
    inside the band, or no step brings it nearer the target). The module's docstring states the rule.

    >>> m = CostModel(8, 800, 32, 3200, 0, 0, 32, 8, 0, 4000, 4000, 8, 8, [100, 100, 0])  # 8 steps: a proposal 100 tokens, an answer 100
    >>> full = (1, 4, 0, 64, 64)
    >>> next_shape(full, m, 0, Target(2000, True, ""), 0.05, 1), next_shape(full, m, 1800, Target(2000, True, ""), 0.05, 1)
    ((1, 4, 0, 64, 64), (1, 1, 0, 64, 64))
    >>> next_shape(full, m, 1900, Target(2000, True, ""), 0.05, 1)  # less than a row left: a row at smaller budgets
    (1, 1, 0, 36, 36)
    >>> next_shape(full, m, 1960, Target(2000, True, ""), 0.05, 1), next_shape(full, m, 0, Target(400, False, ""), 0.05, 1)
    (None, 'wait')
    """
    if target.tokens is None:
        return WAIT
    remaining = target.tokens - spent
    if model.prior and model.spend(full, adapters, worst=True) <= PRIOR_SLACK * remaining:
        return full  # nothing measured yet: the config's step, unless even its bound is far above what is left
    if not target.final:  # follow: a full step only when even its worst case stays under the run's ledger so far
        return full if model.spend(full, adapters, worst=True) <= remaining else WAIT
    band = tolerance / 2 * target.tokens
    if remaining <= band:
        return None
    options = shapes(full)
    fitting = [s for s in options if model.spend(s, adapters, worst=True) <= remaining + band]
    if fitting:
        return max(fitting, key=lambda s: model.spend(s, adapters))
    smallest = options[-1]
    if spent <= 0:  # a budgeted run trains at least one step, however small its target
        return smallest
    return smallest if abs(model.spend(smallest, adapters) - remaining) < remaining else None


def spent_per_adapter(ledger_totals: dict[str, dict[str, float]], alive: int) -> float:
    """The ledger's per-adapter generated + trained tokens (``ComputeLedger.record``'s ``compute/per_adapter``)."""
    return sum(t.get(q, 0.0) for t in ledger_totals.values() for q in TOKENS) / max(1, alive)


class Budget:
    """The trainer's budget: ``shape`` before each step (waiting on a followed run), ``observe`` after it,
    ``words`` at the end. Its cost model is checkpointed with the run (``to_dict``), so a resume keeps it."""

    def __init__(self, cfg: TrainConfig, tracker=None, run_id: str | None = None, state: dict | None = None):
        self.cfg, self.tracker, self.run_id = cfg, tracker, run_id
        self.model = CostModel.from_dict(state) if state else CostModel.from_config(cfg)
        self.target: Target | None = None
        self.sleep = time.sleep  # between reads of a followed run (a test plants that run's end here)
        self.population_job = PopulationJob.from_env(cfg) if cfg.budget.population else None  # its job, if any
        self.adapters = 1  # alive at the last step observed (the cost model's spend is per adapter)
        self._said = self._noted = ""

    def shape(self, totals: dict, alive: int) -> TrainConfig | None:
        """The config of the next step (fewer rows near the target), None when the budget is reached; waits
        (``budget.poll_s``, a stop signal still stops it) while a followed run is not far enough ahead; raises
        ``BudgetError`` when a followed run ended before logging any step, or the population's job before
        starting its run."""
        while True:
            self.target = read_target(self.cfg, self.tracker, self.run_id)
            if not self.target.started and (why := self.population_job and self.population_job.never_started()):
                # read again now that its job's end was seen: a run it created before it ended is in the store
                self.target = read_target(self.cfg, self.tracker, self.run_id)
                if not self.target.started:
                    raise BudgetError(why)
            if self.target.final and self.target.tokens is None:
                raise BudgetError(unmatchable(self.target, self.run_id))
            spent = spent_per_adapter(totals, alive)
            said = self.target.note.split(" (")[0]  # what it is matched at (not how long silent: that grows)
            if self.target.note and said != self._noted:  # ended short of its end: said once, when first seen
                self._say(f"budget: {self.target.note}: {self.target.tokens:.0f} tokens per adapter, this run {spent:.0f}")
                self._noted = said
            choice = next_shape(full_shape(self.cfg), self.model, spent, self.target, self.cfg.budget.tolerance, alive)
            if choice != WAIT:
                return None if choice is None else with_shape(self.cfg, choice)
            self._say(f"budget: waiting for {self.target.source}: {self.target.tokens or 0:.0f} tokens per adapter, "
                      f"this run {spent:.0f}")
            stopping.check()
            self.sleep(self.cfg.budget.poll_s)
            stopping.check()

    def _say(self, line: str) -> None:
        """A line in the run's log (stdout: a job's log; not also logged, which would print it twice there) unless
        it is the last one said."""
        if line != self._said:
            print(line, flush=True)
            self._said = line

    def observe(self, step_cfg: TrainConfig, rows: tuple, realised: float, alive: int) -> None:
        tasks, proposals, answers, batch = rows
        self.adapters = alive
        self.model.observe(full_shape(step_cfg), tasks, proposals, answers, batch, step_cfg.solver.data != "buffer",
                           realised, alive)

    def smallest_step(self) -> float | None:
        """Per-adapter tokens this run's smallest step (one task, one answer, the smallest token budgets) is
        expected to spend, from its measured rows (None before any step)."""
        if self.model.prior or not self.model.steps:
            return None
        return self.model.spend(shapes(full_shape(self.cfg))[-1], self.adapters)

    def notes(self, spent: float) -> list[str]:
        """What the match needs said beside its ratio: the target run ended short of its end (``Target.note``);
        the target is below one step of this run (it overshot because even its smallest step spends more than the
        whole target: a design too small to match, not a rule that missed)."""
        t = self.target
        out = [t.note] if t is not None and t.note else []
        floor = self.smallest_step()
        if t is not None and t.tokens and floor is not None and spent > t.tokens * (1 + self.cfg.budget.tolerance) \
                and floor > t.tokens * (1 + self.cfg.budget.tolerance / 2):
            whole = (f"the population spent {t.tokens:.0f} tokens per adapter in all, less" if self.cfg.budget.population
                     else f"{t.tokens:.0f} tokens per adapter is less")
            mine = "the baseline's" if self.cfg.population.single_agent else "this run's"
            out.append(f"the target is below one step: {whole} than {mine} smallest step (one task, one answer, "
                       f"the smallest token budgets: about {floor:.0f}), so no run of this shape can match it; give "
                       f"the population more steps (or more tasks per step)")
        elif t is not None and t.tokens and floor is not None and spent < t.tokens * (1 - self.cfg.budget.tolerance) \
                and floor - (t.tokens - spent) >= t.tokens - spent:
            mine = "the baseline's" if self.cfg.population.single_agent else "this run's"
            out.append(f"the steps are coarser than the band: {t.tokens - spent:.0f} tokens per adapter were left, "
                       f"and {mine} smallest step (one task, one answer, the smallest token budgets: about "
                       f"{floor:.0f}) would have ended further from the target than stopping; give the population "
                       f"more steps (a target many steps long lands within {100 * self.cfg.budget.tolerance:.0f}%)")
        return out

    def words(self, spent: float, capped: bool = False) -> str:
        """The run's end against its target, one line (printed, and the run's ``populora.budget`` tag)."""
        t = self.target
        cap = (f"; the step cap ({self.cfg.steps}) came first: raise steps" if capped else "")
        if t is None or t.tokens is None:
            return f"budget not reached: {spent:.0f} tokens per adapter, target unknown{cap}"
        ratio = spent / t.tokens
        inside = abs(ratio - 1) <= self.cfg.budget.tolerance
        note = "".join(f"; {n}" for n in self.notes(spent))
        return (f"{'budget reached' if inside else 'budget missed'}: {spent:.0f} tokens per adapter of {t.tokens:.0f} "
                f"({ratio:.3f}x; {t.source}){note}{'' if inside else cap}")

    def tags(self, spent: float, capped: bool = False) -> dict[str, str]:
        """The run's end as tags: ``populora.budget`` (``words``) and ``populora.budget_matched`` (``notes``: what
        the compute figure prints beside its ratio; "" when there is nothing to say, so a resumed run that ends
        matched to a finished run clears it)."""
        return {rl.BUDGET: self.words(spent, capped)[:500], rl.BUDGET_MATCHED: "; ".join(self.notes(spent))[:500]}

    def to_dict(self) -> dict:
        return self.model.to_dict()


def matched_steps_cap(steps: int) -> int:
    """The step cap of a ledger-matched baseline of a population of ``steps`` steps: room for 8x the steps (a
    baseline whose steps are cheaper than its population's, at a low validity rate) and the partial last steps.

    >>> matched_steps_cap(4)
    40
    """
    return min(1_000_000, math.ceil(steps * 8) + 8)
