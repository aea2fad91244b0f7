"""What a training run leaves in MLflow: run-level metrics, per-member metrics, task and answer tables, the
lineage and population, and the run's tags (layout: ``populora.platform.store.runlayout``).

Records are built right after the step (``step_record``, pure) and written by ``RunLog`` after the checkpoint
that contains them, each step's run-level sentinel ``progress/step`` last, so a resumed run logs every step
exactly once.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from populora.platform import config as config_io
from populora.platform.store import family
from populora.platform.jobs import heartbeat, lease
from populora.platform.store import runlayout as rl
from populora.platform.store.tracking import Tracker
from populora.training.run import member_models
from populora.training import periodic_eval
from populora.training.measures import learning
from populora.training.measures.diversity import per_100
from populora.training.evolve.lineage import Lineage
from populora.training.member import Member, Population
from populora.training.run.member_models import PlannedModel
from populora.training.phases.rollout import Rollout
from populora.training.phases.advantages import advantage_groups
from populora.training.tasks import Task

log = logging.getLogger(__name__)

CURRICULUM = ("ast_depth", "cyclomatic", "loc", "variables")


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def step_record(step: int, tasks: list[Task], proposals: list[Rollout], answers: list[Rollout], rates: dict,
                train_stats: dict, population: Population, coverage: int, games: int, timings: dict, replaced: list,
                conservative_k: float, programs_proposed: int | None = None, trained: list[Rollout] | None = None,
                advantage_scope: str = "population") -> dict:
    """``conservative_k``: the k of ``rating/conservative`` = mu - k * sigma, the one evolution ranks by.
    ``trained``: the rollouts the update trained on, with their advantages (``learn/*``: ``learn_metrics``;
    whitened per ``advantage_scope``'s groups).
    ``coverage``: distinct structures teachers wrote so far; ``programs_proposed``: programs they proposed so far
    (valid or not), the denominator of ``curriculum/coverage_per_100`` (volume-biased, kept for older runs' sake;
    arms are compared at equal volume: ``curriculum_tracker``)."""
    valid = [t for t in tasks if t.valid]
    texts = {p.task_id: p.text for p in proposals}  # the teacher's raw completion, reasoning included
    run_metrics = {
        "tasks/proposed": len(tasks), "tasks/valid": len(valid),
        "tasks/validity_rate": len(valid) / len(tasks) if tasks else 0.0,
        "student/solve_rate": _mean([float(a.correct) for a in answers]),
        "student/format_rate": _mean([float(a.answer is not None) for a in answers]),
        "student/reward": _mean([a.reward for a in answers]),
        "teacher/reward": _mean([p.reward for p in proposals]),
        rl.COVERAGE: coverage,
        rl.COVERAGE_PER_100: None if programs_proposed is None else per_100(coverage, programs_proposed),
        "curriculum/novel_rate": _mean([t.metrics.get("novel_structure") for t in valid]),
        "rating/games": games, "evolution/replaced": len(replaced),
    }
    answered = [sum(a.task_id == t.id for a in answers) for t in valid]
    if answered:  # tasks.answers_per_task makes these equal (AZR's n_samples); otherwise they vary with the draws
        run_metrics["tasks/answers_per_task_min"], run_metrics["tasks/answers_per_task_max"] = min(answered), max(answered)
    for kind in sorted({t.kind for t in tasks}):
        of_kind = [t for t in tasks if t.kind == kind]
        run_metrics[f"tasks/validity_rate/{kind}"] = sum(t.valid for t in of_kind) / len(of_kind)
        run_metrics[f"student/solve_rate/{kind}"] = _mean([float(a.correct) for a in answers if a.kind == kind])
    for key in CURRICULUM:
        run_metrics[f"curriculum/{key}"] = _mean([t.metrics.get(key) for t in valid])
    run_metrics.update({f"time/{k}_s": v for k, v in timings.items()})
    learn_run, learn_members = learn_metrics(trained, answers, train_stats, advantage_scope)
    run_metrics.update(learn_run)
    members = member_metrics(tasks, proposals, answers, rates, train_stats, population, conservative_k,
                             dead=[d for d, _ in replaced])
    for m, metrics in learn_members.items():
        members.setdefault(m, {}).update(metrics)
    return {
        "step": step,
        "run_metrics": {k: v for k, v in run_metrics.items() if v is not None},
        "member_metrics": members,
        "tasks": [dict(task_row(t, rates), completion=texts.get(t.id, "")) for t in tasks],
        "answers": [dict(a.summary(), step=step) for a in answers],
        "events": [{"dead": d.id, "child": c.id, "parents": c.parents, "operator": c.operator} for d, c in replaced],
    }


def learn_metrics(trained: list[Rollout] | None, answers: list[Rollout], train_stats: dict,
                  scope: str) -> tuple[dict, dict[str, dict]]:
    """The step's ``learn/*`` diagnostics (training/measures/learning.py), run level and per member: over the
    rollouts the update trained on (none: nothing trained, nothing logged) and the step's student answers."""
    rows = list(trained or [])  # all of them: TRR++ whitens over every rollout of a group (update.assign_advantages)
    if not rows:
        return {}, {}
    return learning.step_metrics([r.member for r in rows], [r.reward for r in rows], [r.advantage for r in rows],
                                 advantage_groups(rows, scope), [len(r.completion_ids) for r in rows], train_stats,
                                 [a.task_id for a in answers], [a.reward for a in answers])


def member_metrics(tasks, proposals, answers, rates, train_stats, population: Population,
                   conservative_k: float, dead: list[Member] = ()) -> dict[str, dict]:
    """Each member's metrics of one step. ``dead``: the members evolution replaced at this step; their rating at
    the step they died is logged too (it is what evolution ranked them by), so a replaced member's last
    ``rating/*`` point is the rating it had when it was replaced, not the one of the step before."""
    out: dict[str, dict] = defaultdict(dict)
    by_teacher = defaultdict(list)
    for t in tasks:
        by_teacher[t.teacher].append(t)
    for teacher_id, ts in by_teacher.items():
        out[teacher_id].update({
            "teacher/validity_rate": sum(t.valid for t in ts) / len(ts),
            "teacher/reward": _mean([p.reward for p in proposals if p.member == teacher_id]),
            "teacher/task_solve_rate": _mean([rates.get(t.id) for t in ts]),
            **{f"curriculum/{k}": _mean([t.metrics.get(k) for t in ts if t.valid]) for k in CURRICULUM},
        })
    by_student = defaultdict(list)
    for a in answers:
        by_student[a.member].append(a)
    for student_id, answers_of in by_student.items():
        out[student_id].update({
            "student/solve_rate": _mean([float(a.correct) for a in answers_of]),
            "student/format_rate": _mean([float(a.answer is not None) for a in answers_of]),
            "student/reward": _mean([a.reward for a in answers_of]),
        })
    for member_id, stats in train_stats.items():
        out[member_id].update({f"train/{k}": v for k, v in stats.items()})
    for m in [*population.alive(), *dead]:
        out[m.id].update({"rating/mu": m.mu, "rating/sigma": m.sigma, "rating/conservative": m.conservative(conservative_k)})
    return {k: {mk: mv for mk, mv in v.items() if mv is not None} for k, v in out.items()}


def task_row(t: Task, rates: dict) -> dict:
    row = {"task_id": t.id, "step": t.step, "kind": t.kind, "teacher": t.teacher, "valid": t.valid, "reason": t.reason,
           "program": t.program, "input": t.input, "output": t.output, "inputs": t.inputs, "outputs": t.outputs,
           "message": t.message, "solve_rate": rates.get(t.id)}
    row.update({f"metric_{k}": v for k, v in t.metrics.items()})
    return row


def summary_line(record: dict, total_steps: int, population: Population) -> str:
    m = record["run_metrics"]
    ratings = " ".join(f"{x.id}:{x.mu:.1f}±{x.sigma:.1f}" for x in population.alive())
    solve = m.get("student/solve_rate")
    return (f"step {record['step']}/{total_steps} | valid {m['tasks/valid']}/{m['tasks/proposed']} "
            f"({100 * m['tasks/validity_rate']:.0f}%) | solve {'n/a' if solve is None else f'{100 * solve:.0f}%'} "
            f"| teacher reward {m.get('teacher/reward', 0):+.2f} | coverage {m['curriculum/coverage']} "
            f"| {m.get('time/step_s', 0):.1f}s{eval_summary(m)} | {ratings}")


def eval_summary(run_metrics: dict) -> str:
    """The in-training evaluation's part of the step line: each benchmark's population mean (weakest).

    >>> eval_summary({"eval_population/mean/gsm8k/score": 0.25, "eval_population/weakest/gsm8k/score": 0.1, "time/eval_s": 3.0})
    ' | eval gsm8k 25% (weakest 10%) 3.0s'
    >>> eval_summary({})
    ''
    """
    mean, weakest = rl.eval_population_key("mean", ""), rl.eval_population_key("weakest", "")
    parts = [f"{key[len(mean):-len('/score')]} {100 * value:.0f}% (weakest {100 * run_metrics.get(weakest + key[len(mean):], 0):.0f}%)"
             for key, value in run_metrics.items() if key.startswith(mean) and key.endswith("/score")]
    return f" | eval {', '.join(parts)} {run_metrics.get('time/eval_s', 0):.1f}s" if parts else ""


def stop_line(run_id: str, step: int, steps: int, checkpoint_step: int | None = None) -> str:
    """What a stopped run prints last (and keeps as its MLflow description).

    >>> stop_line("abc", 2, 30)
    'stopped at step 2/30; resume with `populora train --resume abc`'
    >>> stop_line("abc", 3, 30, 2)
    'stopped at step 3/30; resume with `populora train --resume abc` (it restarts after the checkpoint of step 2)'
    """
    line = f"stopped at step {step}/{steps}; resume with `populora train --resume {run_id}`"
    if checkpoint_step is not None and checkpoint_step != step:
        line += f" (it restarts after the checkpoint of step {checkpoint_step})"
    return line


def stale_note(note: str) -> bool:
    """Whether a run's description is what a stop or a reaper wrote (``stop_line``, ``lost_runs.end_dead``): true
    of the run while it was stopped, not once it finished.

    >>> stale_note(stop_line("abc", 5, 6, 4)), stale_note("lr sweep, second try"), stale_note("")
    (True, False, False)
    """
    return note.startswith("stopped at step ") or "; resume with `populora train --resume" in note


def member_params(m: Member) -> dict:
    return {"member_id": m.id, "role": m.role, "rank": m.rank, "generation": m.generation,
            "parents": ",".join(m.parents) or "-", "operator": m.operator, "born_step": m.born_step}


def refuse_resume(run_id: str, force: bool = False, tracker: Tracker | None = None, run=None) -> None:
    """``ConfigError`` (one line, exit 2) if a resume of the run must not start: another trainer holds it
    (``lease.refusal``; ``force``: a holder on another machine known dead)."""
    tracker = tracker or Tracker()
    if run is None:
        try:
            run = tracker.get_run(run_id)
        except Exception as err:  # noqa: BLE001 - an unknown id: say which store was asked and how to list it
            raise config_io.ConfigError(f"run {run_id} is not in the MLflow store {tracker.uri} ({str(err)[:120]}); "
                                        "`populora runs` lists the runs there") from err
    why = lease.refusal(run.data.tags.get(rl.STATUS, run.info.status.lower()), run.data.tags, force)
    if why:
        raise config_io.ConfigError(f"run {run_id} is not resumed: {why}")


def writer_of(run_id: str, tracker: Tracker | None = None) -> str | None:
    """Words naming the trainer that holds run ``run_id`` and may still write it (``lease.held_by``), None when no
    other process can: what a fork of the run asks before it reads a checkpoint (``checkpoint.pinned``)."""
    run = (tracker or Tracker()).get_run(run_id)
    return lease.held_by(run.data.tags.get(rl.STATUS, run.info.status.lower()), run.data.tags)


class RunLog:
    """Every MLflow write of one training run: its tags and params, one child run per member, the step records,
    the lineage/population artifacts and the end status. The trainer calls it and never MLflow itself."""

    def __init__(self, run_id: str, experiment: str, member_runs: dict[str, str] | None = None, tracker: Tracker | None = None,
                 new: bool = False):
        self.tracker, self.run_id, self.experiment = tracker or Tracker(), run_id, experiment
        self.member_runs: dict[str, str] = dict(member_runs or {})  # member id -> child run id (checkpointed)
        self.new = new  # a run this process created: every child run it has is in member_runs
        self.system_metrics = None  # MLflow's SystemMetricsMonitor on the parent run, while it runs
        self.note = ""  # the description this process gave the run (a fork's origin)
        self.models: dict[tuple[str, int], str] | None = None  # (member, step) -> LoggedModel id, read once
        self.heartbeat: heartbeat.Heartbeat | None = None  # while this process runs the run (platform/jobs/heartbeat.py)
        self.lease = lease.Lease(lambda tags: self.tracker.set_tags(self.run_id, tags),
                                 lambda: dict(self.tracker.get_run(self.run_id).data.tags), run_id)  # one writer

    # ------------------------------------------------------------------ the run
    @classmethod
    def start(cls, cfg, tracker: Tracker | None = None, origin: tuple[str, int, str] | None = None) -> "RunLog":
        """A new parent run, tagged running (and with the job that started it, inside a job). ``origin``: a
        fork's (parent run id, step, description)."""
        tracker = tracker or Tracker()
        kind = rl.BASELINE if cfg.population.single_agent else rl.POPULATION
        tags = {rl.KIND: kind, rl.STATUS: rl.RUNNING, **rl.job_link_tags()}
        if origin:
            tags.update({rl.FORKED_FROM: origin[0], rl.FORK_STEP: str(origin[1]), rl.NOTE: origin[2]})
        if cfg.sandbox.allow_unconfined:
            tags[rl.SANDBOX_UNCONFINED] = "true"
        if cfg.pair:
            tags[rl.PAIR] = cfg.pair
        if origin:  # the family (platform.family): the parent's, or the parent itself if it predates the tag
            tags[family.FAMILY] = family.family_of(origin[0], dict(tracker.client.get_run(origin[0]).data.tags))
        run = cls(tracker.start_run(cfg.experiment, cfg.name, tags=tags), cfg.experiment, tracker=tracker, new=True)
        if not origin:  # a root run is its own family
            tracker.set_tags(run.run_id, {family.FAMILY: run.run_id})
        run.note = tags.get(rl.NOTE, "")
        run.lease.take()
        run.start_heartbeat()
        run.watch_system(resume=False)
        return run

    def family_floor(self) -> dict[str, int]:
        """The ids the other runs of this run's family have given out (``platform.family.floor_of``): what this
        run's counters go on from (``Population.reserve``) before it gives out ids."""
        return family.floor_of(self.tracker.client, self.tracker.uri, self.run_id)

    def publish_ids(self, population: Population) -> None:
        """The ids this run has given out, for its family's other runs (tag ``populora.next_ids``)."""
        self.tracker.set_tags(self.run_id, {family.NEXT_IDS: family.encode(population.next_index)})

    def start_heartbeat(self, run_dir: Path | None = None) -> None:
        """Beat from now until the run ends (``end``): the run's tag, ``<run dir>/heartbeat.json`` once the run dir is
        known, and the job dir's copy inside a local job (the supervisor reads a killed trainer's step from it)."""
        job_dir = rl.job_dir_from_env()
        files = [Path(p) / heartbeat.FILE for p in (run_dir, job_dir) if p is not None and Path(p).is_dir()]
        self.lease.lock(run_dir)
        if self.heartbeat is not None:
            self.heartbeat.files = list(dict.fromkeys(self.heartbeat.files + files))
            return
        self.heartbeat = heartbeat.Heartbeat(lambda text: self.tracker.set_tags(self.run_id, {rl.HEARTBEAT: text}),
                                             files, run_id=self.run_id).start()

    def beat_at(self, step: int) -> None:
        """The trainer starts ``step`` (the heartbeat files say which step a killed trainer was on)."""
        if self.heartbeat is not None:
            self.heartbeat.at(step)

    def resized(self, note: str, summary: str) -> None:
        """A fork that resized the population (``training.resize``): its description and tag say how."""
        self.note = note
        self.tracker.set_tags(self.run_id, {rl.NOTE: note, rl.FORK_RESIZE: summary})

    def watch_system(self, resume: bool) -> None:
        """MLflow's own system metrics on the parent run (``system/cpu_utilization_percentage``,
        ``system/gpu_0_utilization_percentage``, ``system/gpu_0_memory_usage_megabytes``, ...; GPUs through
        nvidia-ml-py), so MLflow and the Runs page show whether the GPUs are busy. On by default where a CUDA GPU
        is visible; ``POPULORA_SYSTEM_METRICS=1`` / ``0`` forces it on / off."""
        wanted = os.environ.get("POPULORA_SYSTEM_METRICS")
        if wanted is None:
            import torch

            on = torch.cuda.is_available()
        else:
            on = wanted.strip().lower() in ("1", "true", "yes", "on")
        if not on or self.system_metrics is not None:
            return
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self.system_metrics = SystemMetricsMonitor(self.run_id, resume_logging=resume, tracking_uri=self.tracker.uri)
            self.system_metrics.start()
        except Exception as err:  # noqa: BLE001 - a missing psutil/pynvml must not stop training
            log.warning("no system metrics for run %s: %s", self.run_id, err)
            self.system_metrics = None

    def describe(self, cfg, run_dir: Path) -> None:
        """The run's config (all of it, as params and as the ``config.yaml`` artifact) and where its files are;
        tells the job which run it is."""
        self.start_heartbeat(run_dir)
        self.tracker.set_tags(self.run_id, {rl.RUN_DIR: str(run_dir), rl.PROGRESS: rl.progress(0, cfg.steps),
                                            rl.BASE_MODEL: cfg.model.base, rl.BASELINE_RUN: cfg.baseline_run or "",
                                            rl.TASKS_FORMAT: cfg.tasks.format, **periodic_eval.run_tags(cfg)})
        self.tracker.log_params(self.run_id, config_io.flatten(cfg))
        self.tracker.log_text(self.run_id, config_io.dump(cfg), rl.CONFIG_FILE)  # eval/export without the run dir
        if cfg.baseline_run and not cfg.population.single_agent:
            rl.link_baseline(self.tracker, self.run_id, cfg.baseline_run)
        if cfg.pair:
            rl.link_pair(self.tracker, self.run_id, cfg.pair)
        rl.record_job_run(self.run_id)

    def seeded(self, report, buffers) -> None:
        """What step-0 seeding did: tags (summary, kinds that fell back) and each kind's valid count at step 0."""
        self.tracker.set_tags(self.run_id, {rl.SEED_SUMMARY: report.summary()[:500],
                                            rl.SEED_FALLBACK: ",".join(report.fallback) or "none"})
        self.tracker.log_metrics(self.run_id, {f"seed/valid/{k}": float(buffers.count(k)) for k in buffers.kinds}
                                 | {"time/seed_s": report.seconds}, 0)

    @staticmethod
    def recorded_run_dir(run_id: str, tracker: Tracker | None = None) -> Path:
        """The run dir a run was tagged with; LookupError if the store has no such run."""
        from mlflow.exceptions import MlflowException

        try:
            return rl.run_dir((tracker or Tracker()).get_run(run_id))
        except MlflowException as err:
            raise LookupError(f"no run {run_id!r} in this MLflow store ({err.message[:120]})") from None

    def phase(self, text: str) -> None:
        """The run's ``populora.phase`` tag: where its trainer is inside a step (platform/progress.py, at most
        every 30 s). A store that refuses the write costs the line, never the run: the next phase tries again."""
        try:
            self.tracker.set_tags(self.run_id, {rl.PHASE: text[:250]})
        except Exception as err:  # noqa: BLE001 - a progress line is not worth a training run
            log.debug("phase tag not written: %s", err)

    def resumed(self, checkpoint: str, alive: list[str] = (), force: bool = False) -> None:
        """Reopen the run, and the member runs of the ``alive`` members (ended with the process that stopped). Refused
        while another trainer holds it (``lease.refusal``; ``force``: a holder on another machine known dead): two
        writers would train the same steps and lose one. The run dir's lock is taken before anything is written."""
        run = self.tracker.get_run(self.run_id)
        refuse_resume(self.run_id, force, run=run)
        try:
            self.lease.lock(rl.run_dir_of(run.data.tags))
        except lease.LeaseLost as err:
            raise config_io.ConfigError(str(err)) from None
        self.lease.take()
        self.tracker.reopen(self.run_id)
        # a fresh beat with the running status: a run shown crashed is running again
        self.tracker.set_tags(self.run_id, {rl.STATUS: rl.RUNNING, rl.RESUMED_FROM: checkpoint, **rl.resume_job_tags()})
        self.start_heartbeat(rl.run_dir_of(run.data.tags))
        for member_id in alive:
            if member_id in self.member_runs:
                self.tracker.reopen(self.member_runs[member_id])
        rl.record_job_run(self.run_id)
        self.watch_system(resume=True)

    def _lost(self) -> bool:
        """Whether another trainer holds the run now (then this one lets go of its lock and writes nothing)."""
        try:
            self.lease.check()
        except lease.LeaseLost:
            self._let_go()
            return True
        except Exception:  # noqa: BLE001 - the store unreachable: the end's own writes say so
            pass
        return False

    def _let_go(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None
        self.lease.release()

    def check_lease(self) -> None:
        """``LeaseLost`` if another trainer took the run meanwhile (a forced resume while this one was suspended):
        called before each checkpoint and step record, so a woken trainer writes nothing more."""
        self.lease.check()

    def end(self, status: str) -> None:
        """Tag the run ``status`` (finished | failed | stopped) and end it in MLflow, with every member run still
        open: a member's run ends with its parent (FINISHED / FAILED / KILLED), or earlier when it is replaced.
        A trainer that lost its lease ends nothing: the run is the new holder's."""
        if self.heartbeat is not None:  # the status says it from here on
            self.heartbeat.stop()
            self.heartbeat = None
        if self._lost():
            return
        self.lease.release()
        if self.system_metrics is not None:  # its last samples go in before the run ends
            self.system_metrics.finish()
            self.system_metrics = None
        self.tracker.set_tags(self.run_id, {rl.STATUS: status})
        mlflow_status = rl.MLFLOW_STATUS[status]
        for child in self.tracker.children(self.run_id):
            if child.info.status == rl.MLFLOW_STATUS[rl.RUNNING]:
                self.tracker.end_run(child.info.run_id, mlflow_status)
        self.tracker.end_run(self.run_id, mlflow_status)

    def fail(self, err: BaseException) -> None:
        """End the run FAILED with the error that ended it (tag ``populora.error``, traceback in ``error.txt``).

        Best effort, each write on its own: the error may be the store's or a full disk's, and it is the
        caller's job to re-raise the original error, never one from here. The end status goes before the
        traceback artifact, which needs disk space the status does not."""
        import traceback

        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        writes = (lambda: self.tracker.set_tags(self.run_id, {rl.ERROR: f"{type(err).__name__}: {err}"[:5000]}),
                  lambda: self.end(rl.FAILED),
                  lambda: self.tracker.log_text(self.run_id, text, rl.ERROR_FILE))
        for write in writes:
            try:
                write()
            except Exception as second:  # noqa: BLE001 - never mask the original error
                log.warning("could not record the failure of run %s in MLflow: %s", self.run_id, second)

    def ended_by(self, err: BaseException, note: str = "") -> None:
        """End the run for ``err``: stopped on Ctrl-C / SIGTERM (KeyboardInterrupt), failed on anything else.
        ``note`` (a stop): the run's MLflow description, so MLflow's UI says why a KILLED run ended. A lost lease
        ends nothing: the run is another trainer's."""
        if isinstance(err, lease.LeaseLost):
            self._let_go()
            return
        if self._lost():
            return
        if isinstance(err, KeyboardInterrupt):
            try:
                if note:
                    self.tracker.set_tags(self.run_id, {rl.NOTE: note})
                self.end(rl.STOPPED)
            except Exception as second:  # noqa: BLE001
                log.warning("could not mark run %s stopped in MLflow: %s", self.run_id, second)
        else:
            self.fail(err)

    # ------------------------------------------------------------------ members
    def member_run(self, m: Member) -> str:
        """The member's child run, found by tag first so a replayed step never creates a second one."""
        if m.id not in self.member_runs:
            found = [] if self.new else [r for r in self.tracker.children(self.run_id) if r.data.tags.get(rl.MEMBER_ID) == m.id]
            if found:
                self.member_runs[m.id] = found[0].info.run_id
            else:
                params = member_params(m)
                rid = self.tracker.start_run(self.experiment, rl.member_run_name(m.id, m.role), tags=rl.member_tags(params), parent=self.run_id)
                self.tracker.log_params(rid, params)
                self.member_runs[m.id] = rid
        m.mlflow_run_id = self.member_runs[m.id]
        return m.mlflow_run_id

    # ------------------------------------------------------------------ LoggedModels
    def log_models(self, planned: list[PlannedModel], population: Population, latest: dict[str, dict],
                   births: dict[str, dict], base_model: str, artifact: bool = False) -> dict[tuple[str, int], str]:
        """Create the planned LoggedModels (``member_models.plan``) in order, each an output of its member's run,
        and update ``latest`` (member -> {"id", "step"}) as they come. Returns (member, step) -> model id.

        A resumed process first reads the models this run already has: the killed process may have created a
        checkpoint's models and died before that checkpoint was on disk, so the replay finds them, not a second
        copy. ``artifact``: this step's adapters are logged to the member runs too (``log_adapters_every``)."""
        if not planned:
            return {}
        exp = self.tracker.experiment_id(self.experiment)
        if self.models is None:
            self.models = {} if self.new else {
                (m.tags.get(rl.REGISTRY_MEMBER), int(m.tags.get(rl.MODEL_STEP, -1))): m.model_id
                for m in self.tracker.find_models(exp, {rl.REGISTRY_RUN: self.run_id})}
        before, made = {k: dict(v) for k, v in latest.items()}, {}
        for p in planned:
            if p.parent_members:
                p.parents = member_models.resolve(p, births[p.member]["step"], before, latest)
            model_id = self.models.get((p.member, p.step))
            member = population[p.member]
            run = self.member_run(member)
            if model_id is None:
                tags = {rl.REGISTRY_RUN: self.run_id, rl.REGISTRY_MEMBER: p.member, rl.ROLE: member.role,
                        rl.MODEL_STEP: p.step, rl.MODEL_ORIGIN: p.origin, rl.MODEL_PARENTS: ",".join(p.parents) or "-",
                        rl.PARENTS: ",".join(member.parents) or "-", rl.MODEL_ADAPTER: p.adapter_dir}
                if artifact and p.origin != member_models.DIED:
                    tags[rl.MODEL_ARTIFACT] = f"runs:/{run}/{rl.checkpoint_adapter(p.step)}"
                params = {**member_params(member), "base_model": base_model}
                model_id = self.tracker.create_external_model(exp, rl.model_name(p.member, p.step), run, tags, params,
                                                              rl.MODEL_TYPE, p.step)
                self.models[(p.member, p.step)] = model_id
            self.tracker.set_tags(run, {rl.MODEL_ID: model_id})
            latest[p.member] = {"id": model_id, "step": p.step}
            made[(p.member, p.step)] = model_id
        return made

    def models_pruned(self, checkpoints: dict[int, Path], at: int, keep: int) -> list[str]:
        """The LoggedModels whose adapter lay in a checkpoint ``checkpoint.keep`` has just deleted (step -> its dir)
        are tagged ``populora.adapter_pruned``: the path MLflow shows for them is gone, and the tag says why and
        since when (an artifact ``log_adapters_every`` logged stays). A died member's model (its archived adapter,
        outside the checkpoints) is left as it is. Returns the ids tagged."""
        if not checkpoints:
            return []
        exp, tagged = self.tracker.experiment_id(self.experiment), []
        for step, path in checkpoints.items():
            for m in self.tracker.find_models(exp, {rl.REGISTRY_RUN: self.run_id, rl.MODEL_STEP: str(step)}):
                if Path(m.tags.get(rl.MODEL_ADAPTER) or "/").is_relative_to(path):
                    self.tracker.set_model_tags(m.model_id, {rl.MODEL_PRUNED: f"deleted at step {at} (checkpoint.keep={keep})"})
                    tagged.append(m.model_id)
        return tagged

    # ------------------------------------------------------------------ steps
    def write_steps(self, records: list[dict], population: Population, replay: bool = False,
                    models: dict[tuple[str, int], str] | None = None) -> None:
        """Write step records, skipping steps whose sentinel is already there: every member's metrics, then the
        events and tables, then the run-level metrics with each step's sentinel ``progress/step`` in the same
        batch. Batches hold whole steps (``Tracker.log_metric_steps``), so a step is logged once or not at all.

        ``replay`` (after a resume): the killed process may have died half-way through a flush, so a member's
        metrics of a step already in the store are skipped.
        """
        logged = self.tracker.metric_steps(self.run_id, rl.STEP_SENTINEL)
        todo = [r for r in records if r["step"] not in logged]
        by_member: dict[str, dict[int, dict]] = defaultdict(dict)
        for record in todo:
            for member_id, metrics in record["member_metrics"].items():
                by_member[member_id][record["step"]] = metrics
        for member_id, by_step in by_member.items():
            run = self.member_run(population[member_id])
            if replay:
                by_step = {s: m for s, m in by_step.items() if not m or s not in self.tracker.metric_steps(run, next(iter(m)))}
            # a step with a model of this member (a checkpoint's, or its death's): its metrics are that model's too
            linked = {s: (models or {})[(member_id, s)] for s in by_step if (member_id, s) in (models or {})}
            self.tracker.log_metric_steps(run, by_step, linked)
        for record in todo:
            s = record["step"]
            for event in record["events"]:  # a replaced member's run ends when it dies
                dead_run = self.member_run(population[event["dead"]])
                dead = population[event["dead"]]
                self.tracker.set_tags(dead_run, {rl.ALIVE: "false", rl.REPLACED_BY: event["child"], rl.REPLACED_AT: s,
                                                 rl.RUN_NAME: rl.member_run_name(dead.id, dead.role, "replaced", event["child"], s)})
                self.tracker.end_run(dead_run, rl.MLFLOW_STATUS[rl.FINISHED])
            if record.get("tags"):  # a monitor that fired (training.monitors): its run tag
                self.tracker.set_tags(self.run_id, record["tags"])
            self.tracker.log_table(self.run_id, record["tasks"], rl.step_table(rl.TASKS, s))
            self.tracker.log_table(self.run_id, record["answers"], rl.step_table(rl.ANSWERS, s))
        # the sentinel last within each step's batch: its presence means the whole step is in the store
        self.tracker.log_metric_steps(self.run_id, {r["step"]: {**r["run_metrics"], rl.STEP_SENTINEL: r["step"]} for r in todo})

    def write_state(self, step: int, steps: int, lineage: Lineage, population: Population, adapters: bool = False) -> None:
        """After a checkpoint: lineage, population and progress (and, if ``adapters``, each alive member's adapter)."""
        if adapters:
            for m in population.alive():
                if m.adapter_dir and Path(m.adapter_dir).is_dir():
                    self.tracker.log_dir(self.member_run(m), m.adapter_dir, rl.checkpoint_adapter(step))
        self.tracker.log_json(self.run_id, lineage.to_dict(), rl.LINEAGE)
        self.tracker.log_json(self.run_id, population.to_dict(), rl.POPULATION_FILE)
        self.tracker.set_tags(self.run_id, {rl.PROGRESS: rl.progress(step, steps),
                                            family.NEXT_IDS: family.encode(population.next_index)})

    def finish(self, population: Population, skip: set[str] = frozenset()) -> None:
        """Every member's final adapter dir and alive flag (adapters uploaded), the population, status finished.
        ``skip``: members that never lived in this run (a fork's parent had replaced them): no member run."""
        for m in population.members.values():
            if m.id in skip:
                continue
            rid = self.member_run(m)
            tags = {rl.ADAPTER_DIR: m.adapter_dir, rl.ALIVE: str(m.alive).lower()}
            if m.alive:  # a replaced member's run was renamed when it died
                tags[rl.RUN_NAME] = rl.member_run_name(m.id, m.role, "alive")
            self.tracker.set_tags(rid, tags)
            if m.adapter_dir and Path(m.adapter_dir).is_dir():
                self.tracker.log_dir(rid, m.adapter_dir, rl.ADAPTER)
        self.tracker.log_json(self.run_id, population.to_dict(), rl.POPULATION_FILE)
        note = self.tracker.get_run(self.run_id).data.tags.get(rl.NOTE, "")
        if stale_note(note):  # "stopped at step 5/6; resume with ..." stayed on the Runs page after the run finished
            self.tracker.set_tags(self.run_id, {rl.NOTE: self.note})
        self.end(rl.FINISHED)
