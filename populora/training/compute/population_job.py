"""The population's job, as its compute-matched baseline sees it while the population has no MLflow run yet
(budget.py's "waiting for the population (not started yet)"): still to start its run (queued, starting, running
before the run exists), or ended without ever starting it (a bad config, a missing file, stopped or killed while
queued), which no wait mends: the baseline then ends FAILED saying so (``BudgetError``, budget.Budget.shape)
instead of waiting for ever.

The baseline finds its population's job from its own job's dir (``POPULORA_JOB_DIR``, set by the local launcher):

- launched with it as a pair (the Launch page's baseline box): the other jobs of the same jobs dir whose config
  (``config.yaml``) has the baseline's ``pair`` and is a population (not ``population.single_agent``);
- a sweep's baseline (``populora sweep --baseline``, no ``pair``): its sweep's dir (above its jobs' dirs) holds the
  plan, which names the population runs of its seed, and the driver's record of the job started for each
  (``platform/store/sweep.py``); a planned population with no job yet is still to start.

Anything else keeps the wait as it was, since the population may still start as far as the baseline can tell: no
job dir (a baseline started in a terminal, or a Ray Job, whose trainer runs away from its job dir), no population
job found (a population started by hand, or from another jobs dir), a population job that has linked a run (the
store shows that run, and budget.read_target follows it), a Ray Job (its state is Ray's to tell), and a job "lost"
on another machine than the one it ran on (its pid means nothing here).

Cheap enough for every poll: the jobs dir is listed and each new job dir's config read once (only a config that
names the pair is parsed); after that only the population's job record and status files are read.
"""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from populora.platform.jobs import jobs, queue
from populora.platform.store import runlayout as rl
from populora.platform.store import sweep as S
from populora.platform.jobs.job_record import Job
from populora.training.config import TrainConfig

HOW = {"failed": "failed", "stopped": "was stopped", "finished": "ended", "lost": "was lost (its supervisor is gone)"}
TAIL_BYTES = 4096  # the end of a job's log read for its last line
SAY = 240  # characters of that line said


class PopulationJob:
    """The job(s) of a baseline's population (found once, then read at each call). ``job_dir``: the baseline's
    own job dir (default: ``POPULORA_JOB_DIR``, None outside a local job)."""

    def __init__(self, cfg: TrainConfig, job_dir: str | Path | None = None):
        self.cfg = cfg
        self.job_dir = Path(job_dir) if job_dir is not None else None
        self._read: set[str] = set()  # job dirs next to ours whose config was read (a pair)
        self._found: list[Path] = []  # ... the population's among them

    @classmethod
    def from_env(cls, cfg: TrainConfig) -> "PopulationJob":
        return cls(cfg, rl.job_dir_from_env())

    def never_started(self) -> str | None:
        """Why the population will never start its run, in words (the baseline's error), or None while it may:
        some job of it is queued, starting, running or has linked a run, or none is known.

        >>> PopulationJob(TrainConfig(pair="p1"), job_dir=None).never_started() is None  # not in a job: no telling
        True
        """
        if self.job_dir is None:
            return None
        found = self._pair_jobs() if self.cfg.pair else self._sweep_jobs()
        ended = [ended_without_run(d) for d in found or []]
        if not ended or any(e is None for e in ended):
            return None
        return words(ended, self._whose(), self._again())

    # ------------------------------------------------------------------ where its jobs are
    def _pair_jobs(self) -> list[Path]:
        """The jobs next to ours whose config is a population with our ``pair`` (new job dirs read once each)."""
        try:
            dirs = sorted(p for p in self.job_dir.parent.iterdir()
                          if p != self.job_dir and str(p) not in self._read and not p.name.startswith("."))  # .queue
        except OSError:
            return self._found
        for d in dirs:
            if not (d / "job.json").is_file():  # still being made (its config is written first): read it next time
                continue
            self._read.add(str(d))
            if self._is_population(d / jobs.CONFIG_FILE):
                self._found.append(d)
        return self._found

    def _is_population(self, config: Path) -> bool:
        try:
            text = config.read_text()
            data = yaml.safe_load(text) if self.cfg.pair in text else None  # parsed only if it names the pair
        except (OSError, yaml.YAMLError):  # a resume or fork job has no config: its run exists already
            return False
        return (isinstance(data, dict) and data.get("pair") == self.cfg.pair
                and not (data.get("population") or {}).get("single_agent"))

    def _sweep_jobs(self) -> list[Path] | None:
        """The job dirs of the population runs of our seed in our sweep (None while one has no job yet; [] when
        this is no sweep's baseline)."""
        sweep_dir = self.job_dir.parent.parent
        plan = S.read_plan(sweep_dir)
        ours = S.run_key(S.BASELINE_LABEL, self.cfg.seed)
        if not any(r.get("key") == ours and r.get("baseline") for r in plan):
            return []
        keys = [r.get("key") for r in plan if r.get("seed") == self.cfg.seed and not r.get("baseline")]
        started = S.read_jobs(sweep_dir)
        if not keys or any(k not in started for k in keys):  # the driver has not started it yet
            return None
        return [Path(started[k]) for k in keys]

    def _whose(self) -> str:
        if self.cfg.pair:
            return "the population"
        return f"the population of seed {self.cfg.seed} in sweep {self.job_dir.parent.parent.name}"

    def _again(self) -> str:
        if self.cfg.pair:
            return ("launch the population and its baseline again (the Launch page's baseline box, or populora "
                    "train --config CONFIG --baseline)")
        return ("run the same sweep again (populora sweep with the same arguments, or the same Launch: it starts "
                "the failed population and this baseline afresh)")


def ended_without_run(job_dir: Path) -> tuple[Job, str] | None:
    """(the job, its status) if it ended without linking a run, else None (still to start it, it has a run, or
    its state cannot be told from here)."""
    try:
        job = Job.load(job_dir)
    except (OSError, ValueError, TypeError):
        return None
    if job.ray_address or rl.read_run_id(job_dir):  # the run id before the status: the trainer writes it first
        return None
    status = job.status
    if status in queue.ACTIVE or status not in HOW or (status == "lost" and job.host != socket.gethostname()):
        return None
    return job, status


def words(ended: list[tuple[Job, str]], whose: str, again: str) -> str:
    """The baseline's error: which job ended how, where its log is, and what to do."""
    each = []
    for job, status in ended:
        code = job.exit_code
        line = last_line(job.log_path)
        said = f'; its last line: "{line}"' if line else ""
        each.append(f"job {job.id}{f' ({job.name})' if job.name else ''} {HOW[status]}"
                    f"{f' (exit code {code})' if code is not None else ''} before it created its MLflow run "
                    f"(log: {job.log_path}{said})")
    return (f"cannot match the compute of {whose}: it never started and no longer can: {'; '.join(each)}; fix "
            f"what ended it, then {again}, or give this baseline a number: --set budget.tokens=N")


def last_line(log: Path) -> str:
    """The last non-empty line of a log (its end only is read), shortened to ``SAY`` characters (with "...").

    >>> import tempfile
    >>> log = Path(tempfile.mkdtemp()) / "log.txt"
    >>> _ = log.write_text("loading the model\\nerror: no model at /m\\n\\n")
    >>> last_line(log), last_line(log.with_name("none.txt"))
    ('error: no model at /m', '')
    """
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [s.strip() for s in tail.splitlines() if s.strip()]
    if not lines:
        return ""
    return lines[-1] if len(lines[-1]) <= SAY else lines[-1][:SAY - 3].rstrip() + "..."
