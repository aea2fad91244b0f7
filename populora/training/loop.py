"""The co-evolution loop. ``Trainer.step`` reads top to bottom as the paper's five phases:
match -> propose -> validate -> solve -> update, then evolve, checkpoint and log."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from populora.platform import config as config_io
from populora.platform.backend import LoraSpec, PeftBackend
from populora.platform.models import cached_source, load_base, resolve_source
from populora.platform.tracking import Tracker
from populora.training import checkpoint, run_log
from populora.training.buffers import TaskBuffers, buffer_kinds
from populora.training.config import TrainConfig
from populora.training.evolution import evolve
from populora.training.lineage import Lineage, LineageEvent
from populora.training.matchmaking import match
from populora.training.member import BOTH, STUDENT, TEACHER, Member, Population
from populora.training.multilora import MultiLoraBackend
from populora.training.propose import propose
from populora.training.scoring import assign_rewards, update_ratings
from populora.training.seeding import initial_buffers, seed_buffers
from populora.training.solve import solve
from populora.training.update import update
from populora.training.validate import validate

log = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: TrainConfig, tracker: Tracker, run_id: str, run_dir: Path):
        self.cfg, self.tracker, self.run_id, self.run_dir = cfg, tracker, run_id, run_dir
        self.backend, self.verifier = make_backend(cfg), make_verifier(cfg)
        self.population = Population()
        self.lineage = Lineage()
        self.buffers = TaskBuffers(buffer_kinds(cfg.tasks.kinds), cfg.tasks.buffer_size)
        self.seen_structures: set[str] = set()
        self.pending: list[dict] = []
        self.member_runs: dict[str, str] = {}
        self.step_index = 0
        self.seed_report = None  # what step-0 seeding did (a new run only)
        self.rng = np.random.default_rng(cfg.seed)
        self.torch_gen = torch.Generator().manual_seed(cfg.seed)

    # ================================================================== the step
    def step(self) -> dict:
        cfg, s = self.cfg, self.step_index + 1
        seed = self.cfg.seed * 100_003 + s
        timings, t0 = {}, time.perf_counter()
        teachers, students = self.population.teachers, self.population.students

        with _timed(timings, "match"):      # 1. pair students with teachers by TrueSkill (PFSP)
            pairs = match(teachers, students, cfg.matchmaking.teachers_per_student, cfg.matchmaking.pfsp, cfg.matchmaking.pfsp_power, self.rng)
        with _timed(timings, "propose"):    # 2. teachers write code_o / code_i / code_f tasks
            tasks, proposals = propose(self.backend, teachers, self.buffers, cfg, s, self.rng, seed)
        with _timed(timings, "validate"):   # 3. the sandbox drops invalid / nondeterministic tasks
            validate(self.verifier, tasks, self.buffers, self.seen_structures)
        with _timed(timings, "solve"):      # 4. matched students answer, the sandbox checks
            answers = solve(self.backend, self.verifier, tasks, pairs, cfg, seed + 7)
        with _timed(timings, "update"):     # 5. rewards, zero-sum TrueSkill, one PG step per adapter
            rates = assign_rewards(tasks, proposals, answers, cfg)
            games = update_ratings(tasks, answers, self.population, cfg.matchmaking.rate_unsolved)
            train_stats = update(self.backend, proposals + answers, cfg)

        replaced = []
        if cfg.evolution.every and s % cfg.evolution.every == 0:
            with _timed(timings, "evolve"):
                replaced = evolve(self.population, self.backend, self.lineage, cfg, s, self.rng, self.torch_gen, self.run_dir / "adapters")
                for dead, child in replaced:
                    self.backend.init_optimizer(child.id, cfg.optim.lr, cfg.optim.weight_decay)

        timings["step"] = time.perf_counter() - t0
        record = run_log.step_record(s, tasks, proposals, answers, rates, train_stats, self.population,
                                     len(self.seen_structures), games, timings, replaced)
        self.step_index = s
        self.pending.append(record)
        if s % cfg.checkpoint.every == 0 or s == cfg.steps:
            self.save_checkpoint()
            self.flush()
        return record

    def train(self, progress: bool = True, on_step=None) -> None:
        from tqdm import tqdm

        bar = tqdm(total=self.cfg.steps, initial=self.step_index, desc="training", disable=not progress, dynamic_ncols=True)
        try:
            while self.step_index < self.cfg.steps:
                record = self.step()
                bar.update(1)
                line = run_log.summary_line(record, self.cfg.steps, self.population)
                bar.write(line) if progress else log.info(line)
                if on_step:
                    on_step(record)
            self.finish()
        except KeyboardInterrupt:
            self.tracker.set_tags(self.run_id, {"populora.status": "stopped"})
            self.tracker.end_run(self.run_id, "KILLED")
            raise
        except Exception:
            self.tracker.set_tags(self.run_id, {"populora.status": "failed"})
            self.tracker.end_run(self.run_id, "FAILED")
            raise
        finally:
            bar.close()

    # ================================================================== setup
    @classmethod
    def create(cls, cfg: TrainConfig) -> "Trainer":
        tracker = Tracker()
        kind = "baseline" if cfg.population.single_agent else "population"
        run_id = tracker.start_run(cfg.experiment, cfg.name, tags={"populora.kind": kind, "populora.status": "running"})
        run_dir = (Path(cfg.output_dir) / run_id).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        tracker.set_tags(run_id, {"populora.run_dir": str(run_dir), "populora.progress": f"0/{cfg.steps}",
                                  "populora.base_model": cfg.model.base, "populora.baseline_run": cfg.baseline_run or "",
                                  "populora.tasks_format": cfg.tasks.format})
        tracker.log_params(run_id, config_io.flatten(cfg))
        (run_dir / "config.yaml").write_text(config_io.dump(cfg))
        trainer = cls(cfg, tracker, run_id, run_dir)
        trainer._init_population()
        trainer._seed_buffers()
        return trainer

    def _init_population(self) -> None:
        pc, rank = self.cfg.population, self.cfg.model.lora_rank
        roles = [BOTH] if pc.single_agent else [TEACHER] * pc.teachers + [STUDENT] * pc.students
        for i, role in enumerate(roles):
            m = self.population.add(Member(self.population.new_id(role), role, rank))
            self.backend.add_adapter(m.id, seed=self.cfg.seed * 1000 + i)  # LoRA A init, same on every backend
            self.backend.init_optimizer(m.id, self.cfg.optim.lr, self.cfg.optim.weight_decay)
            self.lineage.record(LineageEvent(m.id, [], "init", 0, 0, role))

    def _seed_buffers(self) -> None:
        """AZR's seeding: the base model proposes until each kind's buffer is full (bounded tries); hand-written
        programs only where it wrote nothing valid, said loudly (a warning and the run tag populora.seed_fallback)."""
        tc = self.cfg.tasks
        self.buffers = initial_buffers(self.verifier, buffer_kinds(tc.kinds), tc.buffer_size)
        self.seed_report = seed_buffers(self.backend, self.verifier, self.buffers, tc, self.rng, self.cfg.seed * 100_003)
        tags = {"populora.seed_summary": self.seed_report.summary()[:500],
                "populora.seed_fallback": ",".join(self.seed_report.fallback) or "none"}
        self.tracker.set_tags(self.run_id, tags)
        self.tracker.log_metrics(self.run_id, {f"seed/valid/{k}": float(self.buffers.count(k)) for k in self.buffers.kinds}
                                 | {"time/seed_s": self.seed_report.seconds}, 0)
        if self.seed_report.fallback:
            log.warning("the base model proposed no valid %s task in %d seeding round(s); those buffers use "
                        "hand-written programs (run tag populora.seed_fallback)", "/".join(self.seed_report.fallback),
                        self.seed_report.rounds)

    # ================================================================== checkpoint / resume
    def save_checkpoint(self) -> Path:
        state = {
            "step": self.step_index, "population": self.population.to_dict(), "lineage": self.lineage.to_dict(),
            "buffers": self.buffers.to_dict(), "seen_structures": sorted(self.seen_structures),
            "pending": self.pending, "member_runs": self.member_runs, "run_id": self.run_id,
        }
        rng_state = {"numpy": self.rng.bit_generator.state, "torch": torch.get_rng_state(), "torch_gen": self.torch_gen.get_state()}
        members = [m.id for m in self.population.alive()]
        path = checkpoint.save(self.run_dir, self.step_index, state, config_io.dump(self.cfg), self.backend, members, rng_state)
        for m in self.population.alive():
            m.adapter_dir = str(path / "adapters" / m.id)
        return path

    @classmethod
    def resume(cls, run_id: str) -> "Trainer":
        from mlflow.exceptions import MlflowException

        tracker = Tracker()
        try:
            run = tracker.get_run(run_id)
        except MlflowException as err:
            raise checkpoint.CheckpointError(f"no run {run_id!r} in this MLflow store ({err.message[:120]}); list runs with: populora runs") from None
        run_dir = Path(run.data.tags.get("populora.run_dir", ""))
        path = checkpoint.latest(run_dir) if run_dir.is_dir() else None
        if path is None:
            raise checkpoint.CheckpointError(f"run {run_id} has no checkpoint under {str(run_dir)!r}; start a new run instead")
        state, config_yaml, rng_state = checkpoint.load(path)
        cfg = config_io.build(TrainConfig, yaml.safe_load(config_yaml), source=f"checkpoint {path}")
        trainer = cls(cfg, tracker, run_id, run_dir)
        trainer._restore(path, state, rng_state)
        tracker.reopen(run_id)
        tracker.set_tags(run_id, {"populora.status": "running", "populora.resumed_from": path.name})
        trainer.flush(replay=True)  # records the killed process checkpointed but may not have logged
        return trainer

    def _restore(self, path: Path, state: dict, rng_state: dict) -> None:
        self.step_index = state["step"]
        self.population = Population.from_dict(state["population"])
        self.lineage = Lineage.from_dict(state["lineage"])
        self.buffers.load(state["buffers"])
        self.seen_structures = set(state["seen_structures"])
        self.pending, self.member_runs = state["pending"], state["member_runs"]
        for m in self.population.alive():
            self.backend.add_adapter(m.id, from_dir=path / "adapters" / m.id)
            self.backend.init_optimizer(m.id, self.cfg.optim.lr, self.cfg.optim.weight_decay)
            self.backend.load_optimizer_state(m.id, torch.load(path / "optim" / f"{m.id}.pt", weights_only=False))
        self.rng.bit_generator.state = rng_state["numpy"]
        torch.set_rng_state(rng_state["torch"])
        self.torch_gen.set_state(rng_state["torch_gen"])

    # ================================================================== MLflow
    def member_run(self, m: Member) -> str:
        """The member's child run, found by tag first so a replayed step never creates a second one."""
        if m.id not in self.member_runs:
            found = [r for r in self.tracker.children(self.run_id) if r.data.tags.get("populora.member_id") == m.id]
            if found:
                self.member_runs[m.id] = found[0].info.run_id
            else:
                params = run_log.member_params(m)
                tags = {f"populora.{k}": v for k, v in params.items()}
                rid = self.tracker.start_run(self.cfg.experiment, f"{m.id} ({m.role})", tags=tags, parent=self.run_id)
                self.tracker.log_params(rid, params)
                self.member_runs[m.id] = rid
        m.mlflow_run_id = self.member_runs[m.id]
        return m.mlflow_run_id

    def flush(self, replay: bool = False) -> None:
        """Write pending step records to MLflow, skipping steps whose sentinel is already there.

        ``replay`` (after a resume): the killed process may have died half-way through a step's records, so each
        member's batch (one atomic log_batch) is also skipped if it is already in the store.
        """
        logged = self.tracker.metric_steps(self.run_id, "progress/step")
        for record in self.pending:
            s = record["step"]
            if s in logged:
                continue
            for member_id, metrics in record["member_metrics"].items():
                run = self.member_run(self.population[member_id])
                if replay and metrics and s in self.tracker.metric_steps(run, next(iter(metrics))):
                    continue
                self.tracker.log_metrics(run, metrics, s)
            for event in record["events"]:
                self.tracker.set_tags(self.member_run(self.population[event["dead"]]), {"populora.alive": "false", "populora.replaced_by": event["child"]})
            self.tracker.log_table(self.run_id, record["tasks"], f"tasks/step_{s:06d}.json")
            self.tracker.log_table(self.run_id, record["answers"], f"answers/step_{s:06d}.json")
            self.tracker.log_metrics(self.run_id, record["run_metrics"], s)
            self.tracker.log_metrics(self.run_id, {"progress/step": s}, s)  # sentinel, last
        self.pending = []
        every = self.cfg.checkpoint.log_adapters_every
        if every and self.step_index % every == 0:
            for m in self.population.alive():
                if Path(m.adapter_dir).is_dir():
                    self.tracker.log_dir(self.member_run(m), m.adapter_dir, f"checkpoints/step_{self.step_index:06d}/adapter")
        self.tracker.log_json(self.run_id, self.lineage.to_dict(), "lineage.json")
        self.tracker.log_json(self.run_id, self.population.to_dict(), "population.json")
        self.tracker.set_tags(self.run_id, {"populora.progress": f"{self.step_index}/{self.cfg.steps}"})

    def finish(self) -> None:
        adapters = self.run_dir / "adapters"
        for m in self.population.alive():
            m.adapter_dir = str(self.backend.save_adapter(m.id, adapters / m.id))
        for m in self.population.members.values():
            rid = self.member_run(m)
            self.tracker.set_tags(rid, {"populora.adapter_dir": m.adapter_dir, "populora.alive": str(m.alive).lower()})
            if Path(m.adapter_dir).is_dir():
                self.tracker.log_dir(rid, m.adapter_dir, "adapter")
        self.tracker.log_json(self.run_id, self.population.to_dict(), "population.json")
        self.tracker.set_tags(self.run_id, {"populora.status": "finished"})
        self.tracker.end_run(self.run_id, "FINISHED")


def make_backend(cfg: TrainConfig):
    """The model backend the config asks for: batched multi-LoRA (default), PEFT, or multi-LoRA on Ray actors."""
    mc, pc = cfg.model, cfg.population
    spec = LoraSpec(mc.lora_rank, mc.lora_alpha, mc.lora_dropout, tuple(mc.target_modules))
    slots = 1 if pc.single_agent else pc.teachers + pc.students
    if cfg.ray.address:
        from populora.platform.models import load_tokenizer
        from populora.training.ray_backend import RayBackend, init_ray

        ray = init_ray(cfg.ray.address, cfg.ray.num_cpus)
        tok = load_tokenizer(_tokenizer_source(mc))
        rc = cfg.ray
        return RayBackend(ray, mc.model_dump(), tok, spec, rc.model_workers, slots, rc.gpus_per_worker, rc.cpus_per_model_worker)
    base, tok = load_base(resolve_source(mc.base, mc.gguf_file), mc.dtype, mc.device, mc.tiny_random)
    backend = MultiLoraBackend(base, tok, spec, slots) if mc.backend == "multilora" else PeftBackend(base, tok, spec)
    if mc.generation == "vllm":
        from populora.training.vllm_backend import VllmBackend

        source = cached_source(resolve_source(mc.base, mc.gguf_file), need_weights=True)
        sync = Path(cfg.output_dir) / ".vllm-adapters"
        backend = VllmBackend(backend, source.path_or_id, sync, max(slots, 2), mc.lora_rank, mc.vllm_gpu_memory)
    return backend


def _tokenizer_source(mc):
    return cached_source(resolve_source(mc.base, mc.gguf_file), need_weights=False)


def make_verifier(cfg: TrainConfig):
    if cfg.ray.address:
        from populora.training.ray_backend import RayVerifier, init_ray

        rc = cfg.ray
        return RayVerifier(init_ray(rc.address, rc.num_cpus), rc.sandbox_workers, cfg.tasks.timeout_s, cfg.tasks.memory_mb, rc.cpus_per_sandbox_worker)
    from populora.platform.verifier import Verifier

    return Verifier(timeout_s=cfg.tasks.timeout_s, memory_mb=cfg.tasks.memory_mb)


class _timed:
    def __init__(self, timings: dict, name: str):
        self.timings, self.name = timings, name

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.timings[self.name] = time.perf_counter() - self.t0
        return False
