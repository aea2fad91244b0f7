"""The co-evolution loop. ``Trainer.step`` reads top to bottom as the paper's five phases:
match -> propose -> validate -> solve -> update, then evolve, checkpoint and log."""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from populora.platform import config as config_io
from populora.platform import diskspace
from populora.platform import progress as step_progress
from populora.platform.store import runlayout as rl
from populora.platform.jobs import stopping
from populora.platform.backends import BackendConfig, LoraSpec, RaySpec, make_backend
from populora.platform.backends.base import close as close_backend
from populora.platform.backends.ray import init_ray
from populora.platform.sandbox.ray_verifier import RayVerifier
from populora.platform.sandbox.verifier import Verifier
from populora.platform.store.settings_diff import settings_diff
from populora.training.compute import budget
from populora.training.run import checkpoint, faults, member_models, run_log
from populora.training.measures import curriculum, monitors
from populora.training.evolve import operator_stats, probe, resize
from populora.training import periodic_eval
from populora.training.phases.buffers import TaskBuffers, buffer_kinds
from populora.training.config import TrainConfig
from populora.training.measures.curriculum_tracker import CurriculumTracker
from populora.training.evolve.evolution import evolve
from populora.training.run.fork import fork_config, fork_note, role_sizes
from populora.training.compute.ledger import ComputeLedger, EvalLedger, add_to_record, step_compute
from populora.training.evolve.lineage import Lineage, LineageEvent
from populora.training.phases.matchmaking import answer_plan, match
from populora.training.member import BOTH, STUDENT, TEACHER, Member, Population
from populora.training.phases.propose import propose
from populora.training.run.run_log import RunLog
from populora.training.phases.scoring import assign_rewards, update_ratings
from populora.training.phases.seeding import initial_buffers, seed_buffers
from populora.training.phases.solve import solve
from populora.training.phases.solver_batch import solver_batch
from populora.training.phases.update import update
from populora.training.phases.validate import program_rules, validate
from populora.training.tasks import planted, planted_base

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: TrainConfig, log: RunLog, run_dir: Path):
        self.cfg, self.log, self.run_dir = cfg, log, run_dir
        faults.reserve_store_space(log.tracker.uri)  # room for the end status if the store's disk fills
        faults.quiet_store_tracebacks()  # a full store's disk is said in one line, not MLflow's SQL traceback
        # the phase and counts inside a step (run dir and job dir, progress.json): first, the model's loading. A
        # resumed run's dir holds what its last trainer said: its training time and steps go on from there (read
        # before this trainer's first write replaces it), never back to zero while the model loads
        last_word = step_progress.read(run_dir)
        self.progress = step_progress.StepProgress([run_dir, *filter(None, [rl.job_dir_from_env()])], cfg.steps,
                                                   step=step_progress.steps_done(last_word) or 0,
                                                   training_s=step_progress.carried_training_s(last_word),
                                                   on_tag=log.phase)
        self.progress.phase("setup")
        self.backend = None
        try:
            self.backend = make_backend(backend_config(cfg, run_dir))
            self.verifier = make_verifier(cfg)
        except BaseException:
            self.progress.release()
            if self.backend is not None:
                close_backend(self.backend)
            raise
        self.population = Population()
        self.lineage = Lineage()
        self.buffers = TaskBuffers(buffer_kinds(cfg.tasks.kinds), cfg.tasks.buffer_size, cfg.tasks.buffer_full, cfg.tasks.code_f_pool)
        self.seen_structures: set[str] = set()  # program structures teachers wrote (coverage)
        self.programs_proposed = 0                # programs teachers wrote, valid or not (coverage per 100)
        self.curriculum = CurriculumTracker()     # equal-volume diversity, sameness, monitors
        self.pending: list[dict] = []  # step records not yet in MLflow (written after the checkpoint holding them)
        self.step_index = 0
        self.ledger = ComputeLedger()  # measured compute per member (tokens, rollouts)
        self.eval_ledger = EvalLedger()  # in-training evaluation's compute, apart from training's
        # eval.every: the fixed subset, written into the run dir once (None: no in-training evaluation)
        self.evaluation = periodic_eval.PeriodicEval(cfg, run_dir) if cfg.eval.every else None
        self.seed_report = None  # what step-0 seeding did (a new run only)
        self.rng = np.random.default_rng(cfg.seed)
        self.torch_gen = torch.Generator().manual_seed(cfg.seed)
        self.distance = probe.distance_for(self.backend)  # evolution's parent -> child KL (None: not measured)
        self.models: dict[str, dict] = {}  # member -> its newest LoggedModel {"id", "step"} (member_models)
        self.checkpointed = 0  # the step of the last checkpoint written or restored
        self.resume_notes: list[str] = []  # newer checkpoints a resume found damaged and skipped (and why)
        # budget.*: train until the per-adapter ledger reaches a target (training/compute/budget.py); None: train `steps`
        self.budget = budget.Budget(cfg, log.tracker, log.run_id) if cfg.budget.on else None
        self.last_rows: tuple = ()  # the step's (tasks, proposals, answers, buffer batch): the budget's cost model

    # ================================================================== the step
    def step(self, shape: TrainConfig | None = None) -> dict:
        """One step; ``shape``: the config with fewer rows for this step only (a budget's last steps)."""
        cfg, s = shape or self.cfg, self.step_index + 1
        seed = self.cfg.seed * 100_003 + s
        timings, t0 = {}, time.perf_counter()
        teachers, students = self.population.teachers, self.population.students
        self.progress.start_step(s)
        phase = functools.partial(_timed, timings, progress=self.progress)

        with phase("match"):      # 1. pair students with teachers by TrueSkill (PFSP)
            pairs = match(teachers, students, cfg.matchmaking.teachers_per_student, cfg.matchmaking.pfsp, cfg.matchmaking.pfsp_power, self.rng)
        with phase("propose"):    # 2. teachers write code_o / code_i / code_f tasks
            tasks, proposals = propose(self.backend, teachers, self.buffers, cfg, s, self.rng, seed)
        with phase("validate"):   # 3. the sandbox drops invalid / nondeterministic tasks
            validate(self.verifier, tasks, self.buffers, self.seen_structures, program_rules(cfg.tasks))
        with phase("solve"):      # 4. matched students answer (answers_per_task each), the sandbox checks
            answerers = answer_plan(tasks, pairs, teachers, students, cfg.tasks, cfg.matchmaking, self.rng)
            answers = solve(self.backend, self.verifier, tasks, answerers, cfg, seed + 7)
            # solver.data buffer (AZR): those answers only estimate solve rates; students train on a buffer batch
            batch = (solver_batch(self.backend, self.verifier, self.buffers, students, cfg, s, self.rng, seed + 11)
                     if cfg.solver.data == "buffer" else [])
        with phase("update"):     # 5. rewards, zero-sum TrueSkill, clipped PG mini-batch steps per adapter
            rates = assign_rewards(tasks, proposals, answers, cfg)
            games = update_ratings(tasks, answers, self.population, pairs, cfg.matchmaking.rate_unsolved,
                                   cfg.matchmaking.rate_invalid)
            trained = proposals + (batch if cfg.solver.data == "buffer" else answers)
            train_stats = update(self.backend, trained, cfg, s)

        # 6. in-training evaluation on the fixed subset (timed and counted apart from training): every member as
        # it trained this step, so before evolution when it replaces some, then the children it made
        due = self.evaluation is not None and self.evaluation.due(s)
        replaced, scored, eval_s = [], None, 0.0
        if cfg.evolution.every and s % cfg.evolution.every == 0:
            if due:
                t = time.perf_counter()
                self.progress.phase("eval")
                scored = self.evaluation.run(self.backend, [m.id for m in self.population.alive()], s)
                eval_s = time.perf_counter() - t
            with phase("evolve"):
                self.population.reserve(self.log.family_floor())  # ids no run of the family gave out (a fork's too)
                replaced = evolve(self.population, self.backend, self.lineage, cfg, s, self.rng, self.torch_gen,
                                  self.run_dir / "adapters", self.distance)
                if replaced:  # at once, not at the next checkpoint: a relative evolving meanwhile reads them
                    self.log.publish_ids(self.population)
                operator_stats.settle(self.lineage, self.population, s)

        timings["step"] = time.perf_counter() - t0 - eval_s  # training only
        if due:
            t = time.perf_counter()
            self.progress.phase("eval")
            scored = self.evaluation.complete(self.backend, scored, [m.id for m in self.population.alive()], s)
            timings["eval"] = eval_s + time.perf_counter() - t
        self.programs_proposed += sum(curriculum.wrote_program(t) for t in tasks)
        record = run_log.step_record(s, tasks, proposals, answers, rates, train_stats, self.population,
                                     len(self.seen_structures), games, timings, replaced, cfg.evolution.conservative_k,
                                     programs_proposed=self.programs_proposed, trained=trained,
                                     advantage_scope=cfg.optim.advantage_scope)
        if replaced:  # evolution/<operator>/*: children, survival, rating change, KL, seconds so far
            record["run_metrics"].update(operator_stats.metrics(self.lineage, self.population, s))
        distance = self.adapter_distance() if cfg.evolution.every and s % cfg.evolution.every == 0 else None
        run_metrics, by_teacher, record["tags"] = self.curriculum.observe(s, tasks, record["run_metrics"], distance)
        add_to_record(record, by_teacher, run_metrics)
        # the run's training time so far (its steps, over resumes; not the time it sat stopped or loaded the model)
        record["run_metrics"][rl.TRAINING_SECONDS] = self.progress.training_so_far()
        if batch:
            record["run_metrics"].update({"solver/batch_answers": len(batch),
                                          "solver/batch_solve_rate": sum(bool(a.correct) for a in batch) / len(batch)})
        spent = step_compute(proposals + answers + batch, train_stats)  # estimation and training answers both cost
        self.last_rows = (tasks, proposals, answers, batch)
        add_to_record(record, *self.ledger.record(spent, [m.id for m in self.population.alive()], [m.id for m in teachers + students]))
        if scored is not None:
            add_to_record(record, scored.member_metrics, scored.run_metrics)
            add_to_record(record, *self.eval_ledger.record(scored.spent))
        self.step_index = s
        self.pending.append(record)
        if s % cfg.checkpoint.every == 0 or s == cfg.steps:
            self.progress.phase("checkpoint")
            self.save_checkpoint()
            self.flush()
        self.progress.end_step()
        return record

    def adapter_distance(self) -> float | None:
        """Mean weight-space distance between the alive members of each role (population convergence)."""
        values = []
        for role in (TEACHER, STUDENT):
            members = [m.id for m in self.population.alive() if m.role == role]
            if len(members) > 1:
                d = monitors.adapter_distance({m: self.backend.adapter_state(m) for m in members})
                if d is not None:
                    values.append(d)
        return sum(values) / len(values) if values else None

    def train(self, progress: bool = True, on_step=None) -> None:
        from tqdm import tqdm

        bar = tqdm(total=self.cfg.steps, initial=self.step_index, desc="training", disable=not progress, dynamic_ncols=True)
        try:
            while self.step_index < self.cfg.steps:
                stopping.check()  # a stop signal whose raise a finalizer swallowed (during setup or the last step)
                shape = self.budget_shape()
                if shape is None:
                    break
                self.log.beat_at(self.step_index + 1)  # the step a trainer killed now was on (platform/jobs/heartbeat.py)
                record = self.step(shape)
                self.budget_observe(shape)
                bar.update(1)
                line = run_log.summary_line(record, self.cfg.steps, self.population)
                bar.write(line) if progress else print(line, flush=True)  # no bar: one plain line per step (job logs)
                if on_step:
                    on_step(record)
            self.budget_end()
            self.finish()
        except BaseException as err:  # Ctrl-C / SIGTERM: stopped; anything else (a full disk too): failed
            err = faults.explained(err, self.run_id, self.log.tracker.uri, self.run_dir, self.checkpointed)
            self.log.ended_by(err, note=self.stop_line())
            raise err
        finally:
            bar.close()

    # ================================================================== the compute budget (budget.*)
    def budget_shape(self) -> TrainConfig | None:
        """The next step's config: ``cfg`` without a budget; with one, fewer rows near its target, None once it
        is reached (it may wait for a followed run's ledger)."""
        if self.budget is None:
            return self.cfg
        self.spent_before = self.spent_per_adapter()
        return self.budget.shape(self.ledger.totals, len(self.population.alive()))

    def budget_observe(self, shape: TrainConfig) -> None:
        if self.budget is not None:
            realised = self.spent_per_adapter() - self.spent_before
            self.budget.observe(shape, self.last_rows, realised, len(self.population.alive()))

    def spent_per_adapter(self) -> float:
        return budget.spent_per_adapter(self.ledger.totals, len(self.population.alive()))

    def budget_end(self) -> None:
        """A budgeted run's end: its last step checkpointed (the budget may stop it between checkpoints) and
        what it spent against its target as a tag (``populora.budget``)."""
        if self.budget is None:
            return
        if self.checkpointed != self.step_index:
            self.save_checkpoint()
            self.flush()
        tags = self.budget.tags(self.spent_per_adapter(), capped=self.step_index >= self.cfg.steps)
        print(tags[rl.BUDGET], flush=True)
        self.log.tracker.set_tags(self.run_id, tags)

    # ================================================================== setup
    @classmethod
    def create(cls, cfg: TrainConfig) -> "Trainer":
        if cfg.sandbox.allow_unconfined:  # read by every sandbox this process (and its local Ray actors) starts
            os.environ["POPULORA_SANDBOX_ALLOW_UNCONFINED"] = "1"
        periodic_eval.check(cfg)  # eval.every's benchmark data and graders: refused before any MLflow run exists
        log = RunLog.start(cfg)
        # from here on the run exists in MLflow: whatever stops the setup (no model, no sandbox, a full disk,
        # SIGTERM while the model loads) must end it, not leave it RUNNING forever
        trainer = None
        try:
            run_dir = (Path(cfg.output_dir) / log.run_id).resolve()
            run_dir.mkdir(parents=True, exist_ok=True)
            log.describe(cfg, run_dir)
            (run_dir / rl.CONFIG_FILE).write_text(config_io.dump(cfg))
            trainer = cls(cfg, log, run_dir)
            trainer._init_population()
            trainer._seed_buffers()
            stopping.check()  # a stop a finalizer swallowed while the model loaded: stopped before the first step
        except BaseException as err:
            err = faults.explained(err, log.run_id, log.tracker.uri, trainer and trainer.run_dir, 0)
            log.ended_by(err)
            if trainer is not None:
                trainer.close()
            raise err
        return trainer

    def close(self) -> None:
        """Stop the processes this run started: vLLM's engine (local, or one per data-parallel worker), Ray's
        model and sandbox workers. Every end of a run calls it (finished, stopped, failed, a lost worker), so no
        engine holds the GPU memory the next run needs (a local Ray instance ends at this process's exit, as before;
        a process killed outright runs none of this: its engines' reaper ends them, platform/jobs/reaper.py)."""
        self.progress.release()
        backend, self.backend = self.backend, None
        if backend is not None:
            close_backend(backend)
        close_backend(self.verifier)

    def _init_population(self) -> None:
        pc, rank = self.cfg.population, self.cfg.model.lora_rank
        roles = [BOTH] if pc.single_agent else [TEACHER] * pc.teachers + [STUDENT] * pc.students
        for i, role in enumerate(roles):
            m = self.population.add(Member(self.population.new_id(role), role, rank))
            self.backend.add_adapter(m.id, seed=self.cfg.seed * 1000 + i)  # LoRA A init, same on every backend
            self.backend.init_optimizer(m.id, self.cfg.optim)
            self.lineage.record(LineageEvent(m.id, [], "init", 0, 0, role, details={"init_mu": m.mu, "init_sigma": m.sigma}))

    def _seed_buffers(self) -> None:
        """AZR's seeding: the base model proposes until each kind's buffer is full (bounded tries); hand-written
        programs only where it wrote nothing valid, said loudly (a warning and the run tag populora.seed_fallback)."""
        tc = self.cfg.tasks
        self.progress.phase("seed")
        self.buffers = initial_buffers(self.verifier, buffer_kinds(tc.kinds), tc.buffer_size, tc.buffer_full, tc.code_f_pool)
        self.seed_report = seed_buffers(self.backend, self.verifier, self.buffers, tc, self.rng, self.cfg.seed * 100_003)
        self.log.seeded(self.seed_report, self.buffers)
        if self.seed_report.fallback:
            log.warning("the base model proposed no valid %s task in %d seeding round(s); those buffers use "
                        "hand-written programs (run tag populora.seed_fallback)", "/".join(self.seed_report.fallback),
                        self.seed_report.rounds)

    # ================================================================== checkpoint / resume
    def log_models(self) -> None:
        """This checkpoint's LoggedModels (``member_models``): one per alive member, one per member replaced since
        the last checkpoint (at its death, its archived adapter), before the checkpoint that records their ids."""
        s, events = self.step_index, self.lineage.events
        dead = {e.replaced: {"step": e.step, "adapter_dir": self.population[e.replaced].adapter_dir}
                for e in events if e.replaced and self.checkpointed < e.step <= s}
        alive = [{"id": m.id, "adapter_dir": str(rl.checkpoint_dir(self.run_dir, s) / "adapters" / m.id)}
                 for m in self.population.alive()]
        births = {e.child: {"parents": e.parents, "operator": e.operator, "step": e.step} for e in events}
        planned = member_models.plan(s, alive, dead, self.models, births)
        every = self.cfg.checkpoint.log_adapters_every
        self.log.log_models(planned, self.population, self.models, births, self.cfg.model.base,
                            artifact=bool(every) and s % every == 0)

    def save_checkpoint(self) -> Path:
        self.log.check_lease()  # a trainer woken after a forced resume took its run writes no checkpoint into it
        self.log_models()
        state = {
            "step": self.step_index, "population": self.population.to_dict(), "lineage": self.lineage.to_dict(),
            "buffers": self.buffers.to_dict(), "seen_structures": sorted(self.seen_structures),
            "programs_proposed": self.programs_proposed, "curriculum": self.curriculum.to_dict(),
            "pending": self.pending, "member_runs": self.log.member_runs, "run_id": self.run_id,
            "ledger": self.ledger.to_dict(), "eval_ledger": self.eval_ledger.to_dict(), "models": self.models,
            "training_s": self.progress.training_so_far(),
            "budget": self.budget.to_dict() if self.budget else None,
        }
        rng_state = {"numpy": self.rng.bit_generator.state, "torch": torch.get_rng_state(), "torch_gen": self.torch_gen.get_state()}
        members = [m.id for m in self.population.alive()]
        path, pruned = checkpoint.save(self.run_dir, self.step_index, state, config_io.dump(self.cfg), self.backend, members,
                                       rng_state, keep=self.cfg.checkpoint.keep)
        self.log.models_pruned(pruned, self.step_index, self.cfg.checkpoint.keep)  # their models say the dir is gone
        for m in self.population.alive():
            m.adapter_dir = str(path / "adapters" / m.id)
        self.checkpointed = self.step_index
        return path

    @classmethod
    def resume(cls, run_id: str, step: int | None = None, force: bool = False) -> "Trainer":
        """Continue run ``run_id`` from its newest intact checkpoint (``step``: that one); ``resume_notes`` say
        which newer checkpoints were damaged and skipped. Refused at once while another trainer holds the run
        (platform/jobs/lease.py; ``force``: a holder on another machine known dead)."""
        run_dir = _recorded_run_dir(run_id)
        run_log.refuse_resume(run_id, force)  # before loading anything: a live holder refuses it now
        if not (run_dir / rl.CHECKPOINTS).is_dir():
            raise checkpoint.CheckpointError(f"run {run_id} has no checkpoint under {str(run_dir)!r}; start a new run instead")
        path, notes = checkpoint.resumable(run_dir, step)
        state, config_yaml, rng_state = checkpoint.load(path)
        cfg = config_io.build(TrainConfig, yaml.safe_load(config_yaml), source=f"checkpoint {path}")
        periodic_eval.check(cfg)
        trainer = cls(cfg, RunLog(run_id, cfg.experiment, state["member_runs"]), run_dir)
        trainer.resume_notes = notes
        try:
            trainer._restore(path, state, rng_state)
            trainer.population.reserve(trainer.log.family_floor())  # a fork made while it was stopped took ids
            trainer.log.resumed(path.name, [m.id for m in trainer.population.alive()], force=force)
        except BaseException:
            trainer.close()
            raise
        try:
            trainer.flush(replay=True)  # records the killed process checkpointed but may not have logged
        except BaseException as err:  # the run is RUNNING again: end it, as create() does
            err = faults.explained(err, run_id, trainer.log.tracker.uri, run_dir, trainer.checkpointed)
            trainer.log.ended_by(err)
            trainer.close()
            raise err
        return trainer

    @staticmethod
    def refuse_fork(run_id: str, step: int) -> None:
        """CheckpointError at once (before the fork waits in the queue) if run ``run_id`` has no complete checkpoint
        ``step``, naming its live trainer when it has one (not written yet, being written, pruned)."""
        checkpoint.forkable(_recorded_run_dir(run_id), step, run_log.writer_of(run_id))

    @classmethod
    def fork(cls, run_id: str, step: int, overrides: list[str]) -> "Trainer":
        """A new run continuing run ``run_id``'s checkpoint ``step`` (its full state) with ``overrides``
        (validated by ``fork.fork_config``), tagged with its origin; its lineage continues the parent's. It writes
        its own checkpoint of ``step`` at once, so it resumes like any run even if killed before its first step."""
        parent_dir = _recorded_run_dir(run_id)
        # the parent's trainer may still write its run (one writer per run): read a pinned copy its prune cannot take
        with checkpoint.pinned(parent_dir, step, run_log.writer_of(run_id)) as path:
            return cls._fork_from(path, run_id, step, overrides)

    @classmethod
    def _fork_from(cls, path: Path, run_id: str, step: int, overrides: list[str]) -> "Trainer":
        """``fork`` from the checkpoint at ``path`` (the parent's, or a pinned copy of it: read only until the fork
        has written its own checkpoint of ``step``)."""
        state, config_yaml, rng_state = checkpoint.load(path)
        parent_cfg = config_io.build(TrainConfig, yaml.safe_load(config_yaml), source=f"checkpoint {path}")
        cfg = fork_config(parent_cfg, overrides, step, run_id)
        periodic_eval.check(cfg)
        changed = settings_diff(config_io.flatten(parent_cfg), config_io.flatten(cfg), ignore=("pair", "name"))
        log = RunLog.start(cfg, origin=(run_id, step, fork_note(run_id, step, changed)))
        try:  # as create(): from here on the run exists in MLflow, whatever stops the setup must end it
            run_dir = (Path(cfg.output_dir) / log.run_id).resolve()
            run_dir.mkdir(parents=True, exist_ok=True)
            log.describe(cfg, run_dir)
            (run_dir / rl.CONFIG_FILE).write_text(config_io.dump(cfg))
            trainer = cls(cfg, log, run_dir)
            removed, added = [], []
            resizing = not cfg.population.single_agent and role_sizes(cfg) != role_sizes(parent_cfg)

            def shrink() -> None:  # before the adapters load: the removed ones are never loaded
                removed.extend(resize.shrink(trainer.population, trainer.lineage, role_sizes(cfg),
                                             cfg.evolution.conservative_k, step, path, run_dir / "adapters"))

            trainer._restore(path, state, rng_state, before_adapters=shrink if resizing else None)
            if cfg.seed != parent_cfg.seed:  # a changed seed (a fork sweep's seeds): fresh streams, not the checkpoint's
                trainer.reseed(step)
            # the family's numbering: the parent (or another fork) may have given out ids after this checkpoint
            trainer.population.reserve(log.family_floor())
            if resizing:
                added = resize.grow(trainer.population, trainer.backend, trainer.lineage, cfg, step, trainer.rng,
                                    trainer.torch_gen, log.run_id)
                summary = resize.summary(role_sizes(parent_cfg), role_sizes(cfg), removed, added)
                log.resized(fork_note(run_id, step, changed, summary), summary)
            trainer.pending = []  # records of steps <= step are the parent's, logged there
            trainer.progress.training_s = 0.0  # a fork's training time is its own steps'
            for m in trainer.population.members.values():
                m.mlflow_run_id = ""  # the fork's members get their own member runs
            trainer.lineage.forked(run_id, step)
            trainer.save_checkpoint()  # the fork's own copy of the step: the pinned one is no longer read
            trainer.flush()  # lineage, population and progress step/steps
        except BaseException as err:
            log.ended_by(err)
            raise
        return trainer

    def reseed(self, step: int) -> None:
        """Random streams drawn from (``seed``, ``step``) instead of the checkpoint's: forks of one checkpoint with
        different seeds are replicates, not copies (generation seeds already follow ``seed``)."""
        self.rng = np.random.default_rng([self.cfg.seed, step])
        self.torch_gen.manual_seed(self.cfg.seed * 100_003 + step)
        torch.manual_seed(self.cfg.seed * 100_003 + step)

    def _restore(self, path: Path, state: dict, rng_state: dict, before_adapters=None) -> None:
        """The checkpoint's state into this trainer. ``before_adapters``: called once the population and lineage
        are back, before any adapter is loaded (a fork's shrink)."""
        self.step_index = state["step"]
        self.population = Population.from_dict(state["population"])
        self.lineage = Lineage.from_dict(state["lineage"])
        self.buffers.load(state["buffers"])
        self.seen_structures = set(state["seen_structures"])
        self.programs_proposed = state.get("programs_proposed", 0)  # absent in checkpoints from before it existed
        self.curriculum = CurriculumTracker.from_dict(state.get("curriculum"))
        self.pending = state["pending"]
        self.ledger = ComputeLedger.from_dict(state.get("ledger"))
        self.eval_ledger = EvalLedger.from_dict(state.get("eval_ledger"))
        if self.budget is not None and state.get("budget"):  # the cost model measured so far
            self.budget = budget.Budget(self.cfg, self.log.tracker, self.run_id, state["budget"])
        self.models = dict(state.get("models") or {})  # absent in checkpoints from before LoggedModels
        # the checkpoint's training time, or more: what the last trainer said after it (steps and a step cut short
        # past the checkpoint: the Runs page showed it, and a resume must not make it go back)
        self.progress.step = self.step_index
        self.progress.training_s = max(float(state.get("training_s") or 0.0), self.progress.training_s)
        self.checkpointed = self.step_index
        if before_adapters is not None:
            before_adapters()
        for m in self.population.alive():
            checkpoint.restore_member(self.backend, path, m.id, self.cfg.optim)
        self.rng.bit_generator.state = rng_state["numpy"]
        torch.set_rng_state(rng_state["torch"])
        self.torch_gen.set_state(rng_state["torch_gen"])

    # ================================================================== MLflow (through the RunLog)
    @property
    def run_id(self) -> str:
        return self.log.run_id

    def flush(self, replay: bool = False) -> None:
        """Write the pending step records (see RunLog.write_steps for ``replay``), then lineage, population and
        progress, and every ``log_adapters_every`` steps the adapters."""
        self.log.check_lease()
        # each member's newest model is of the step it was made at (this checkpoint's, or a death since the last)
        models = {(m, v["step"]): v["id"] for m, v in self.models.items()}
        pending, store = self.pending, diskspace.store_location(self.log.tracker.uri)
        steps = sorted({r["step"] for r in pending}) or [self.step_index]
        span = str(steps[0]) if steps[0] == steps[-1] else f"{steps[0]}-{steps[-1]}"
        with diskspace.writing(f"the records of step {span} in the MLflow store", store, lambda: len(json.dumps(pending, default=str))):
            self.log.write_steps(self.pending, self.population, replay, models)
            self.pending = []
            every = self.cfg.checkpoint.log_adapters_every
            self.log.write_state(self.step_index, self.cfg.steps, self.lineage, self.population,
                                 adapters=bool(every) and self.step_index % every == 0)

    def stop_line(self) -> str:
        """"stopped at step N/M; resume with ..." (pending records: the steps after the last checkpoint)."""
        return run_log.stop_line(self.run_id, self.step_index, self.cfg.steps, self.step_index - len(self.pending))

    def finish(self) -> None:
        adapters = self.run_dir / "adapters"
        with diskspace.writing("the final adapters", adapters, exact=True):
            for m in self.population.alive():
                m.adapter_dir = str(self.backend.save_adapter(m.id, adapters / m.id))
        self.log.finish(self.population, skip=self.lineage.dead_before_fork())


def _recorded_run_dir(run_id: str) -> Path:
    """The run dir run ``run_id`` recorded (a resume's, a fork's parent); CheckpointError naming how to list runs
    if none."""
    try:
        return RunLog.recorded_run_dir(run_id)
    except LookupError as err:
        raise checkpoint.CheckpointError(f"{err}; list runs with: populora runs") from None


def backend_config(cfg: TrainConfig, run_dir: Path | None = None) -> BackendConfig:
    """The model backend the config asks for: batched multi-LoRA (default), PEFT, or multi-LoRA on Ray actors.

    vLLM's adapter dir is the run's own (``<run dir>/.vllm-adapters``): runs sharing an ``output_dir`` must not
    load each other's adapters under the same member id."""
    mc, pc, rc = cfg.model, cfg.population, cfg.ray
    ray = None if not rc.address else RaySpec(rc.address, rc.num_cpus, rc.model_workers, rc.gpus_per_worker,
                                              rc.cpus_per_model_worker, rc.placement)
    return BackendConfig(
        base=str(planted_base.base_dir()) if mc.base == planted.BASE else mc.base, gguf_file=mc.gguf_file, tiny_random=mc.tiny_random, dtype=mc.dtype, device=mc.device,
        lora=LoraSpec(mc.lora_rank, mc.lora_alpha, mc.lora_dropout, tuple(mc.target_modules)), kind=mc.backend,
        generation=mc.generation, slots=1 if pc.single_agent else pc.teachers + pc.students,
        vllm_gpu_memory=mc.vllm_gpu_memory, vllm_sync_dir=str(Path(run_dir or cfg.output_dir) / ".vllm-adapters"), ray=ray,
        max_model_len=cfg.optim.max_seq_len, vllm_engine=mc.vllm_engine,
        activation_checkpointing=mc.activation_checkpointing)


def make_verifier(cfg: TrainConfig):
    if cfg.ray.address:
        rc = cfg.ray
        return RayVerifier(init_ray(rc.address, rc.num_cpus), rc.sandbox_workers, cfg.tasks.timeout_s, cfg.tasks.memory_mb, rc.cpus_per_sandbox_worker)
    return Verifier(timeout_s=cfg.tasks.timeout_s, memory_mb=cfg.tasks.memory_mb)


class _timed:
    """Times a phase into ``timings``; with ``progress``, tells the step's progress reporter the phase began."""

    def __init__(self, timings: dict, name: str, progress: step_progress.StepProgress | None = None):
        self.timings, self.name, self.progress = timings, name, progress

    def __enter__(self):
        if self.progress is not None:
            self.progress.phase(self.name)
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.timings[self.name] = time.perf_counter() - self.t0
        return False
