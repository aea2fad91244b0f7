"""What a run's curriculum looks like so far, step by step: the structures teachers wrote (in order, per kind and
teacher), which tasks repeat earlier ones at which grain, and the monitors' series and flags.

The trainer calls ``observe`` once per step after the record is built; it returns the step's metrics (run level
and per teacher) and the tags of monitors that fired for the first time. Checkpointed with the trainer's state
(``to_dict`` / ``from_dict``), so a resumed run goes on where it stopped.

Metrics (names in ``runlayout``):
- ``curriculum/programs``: valid programs teachers wrote so far (the volume diversity is compared at);
- ``curriculum/rarefied_structures`` (and ``/<kind>``): expected distinct structures among ``EQUAL_M`` of them,
  drawn from all so far (``diversity.rarefy``): equal volume, comparable across arms;
- ``curriculum/recent_rarefied_structures``: the same among the last ``RECENT`` programs (what they write now);
- ``curriculum/chao1``: estimated total structures of the generator so far;
- ``sameness/{exact,near,semantic}_rate``: the step's valid written programs that repeat an earlier one's
  structure / are a near-duplicate / behave the same; ``sameness/reproposed_rate``: valid tasks proposed before;
- ``degenerate/{constant_output_rate,dead_code}``; ``population/task_overlap`` and ``population/adapter_distance``;
- ``monitor/{collapse,degenerate,convergence,no_signal,out_of_sync}``: 1 while the monitor fires, 0 while it
  does not (the last two read ``learn/no_signal_share`` and ``learn/mismatch_k3`` from the step's run metrics).
"""

from __future__ import annotations

from collections import defaultdict

from populora.platform.store import runlayout as rl
from populora.training.measures import diversity, monitors
from populora.training.measures.curriculum import structure_key, wrote_program
from populora.training.measures.sameness import SamenessIndex, task_behaviour
from populora.training.tasks import Task

EQUAL_M = 20       # programs the logged diversity is rarefied to
RECENT = 60        # the recent window (programs) of recent_rarefied_structures and task overlap
SERIES = ("solve", "ast_depth", "cyclomatic", "diversity", "invalid_rate", "constant_output_rate", "dead_code",
          "reproposed_rate", "task_overlap", "adapter_distance", "no_signal_share", "mismatch_k3")


def _rate(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def constant_output(task: Task) -> bool:
    """Whether the task's output cannot depend on its input: f reads no argument, or (code_f) every input gave
    the same output."""
    if task.metrics.get("ignores_input"):
        return True
    return len(task.outputs) > 1 and len(set(task.outputs)) == 1


class CurriculumTracker:
    def __init__(self):
        self.keys: list[str] = []          # structure key of each valid program teachers wrote, in order
        self.kinds: list[str] = []
        self.teachers: list[str] = []
        self.index = SamenessIndex()
        self.series: dict[str, list] = {name: [] for name in SERIES}
        self.fired: dict[str, int] = {}    # monitor -> step it first fired

    # ------------------------------------------------------------------ one step
    def observe(self, step: int, tasks: list[Task], run_metrics: dict,
                adapter_distance: float | None = None) -> tuple[dict, dict[str, dict], dict[str, str]]:
        """(run metrics, {teacher: metrics}, new tags) of the step, after recording its tasks."""
        valid = [t for t in tasks if t.valid]
        written = [t for t in valid if wrote_program(t)]
        per_teacher: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        seen_keys = set(self.keys)
        grains = {"exact": [], "near": [], "semantic": [], "reproposed": []}
        for t in valid:
            inputs = t.inputs or [t.input]
            verdict = self.index.add(t.program, task_behaviour(t), inputs) if wrote_program(t) else None
            reproposed = verdict["reproposed"] if verdict else self.index.reproposed(t.program, inputs)
            grains["reproposed"].append(reproposed)
            per_teacher[t.teacher]["reproposed"].append(reproposed)
            if verdict is None:
                continue
            key = structure_key(t.program)
            for grain, value in (("exact", key in seen_keys), ("near", verdict["near"]), ("semantic", verdict["semantic"])):
                grains[grain].append(value)
                per_teacher[t.teacher][grain].append(value)
            seen_keys.add(key)
            self.keys.append(key)
            self.kinds.append(t.kind)
            self.teachers.append(t.teacher)
        out = {f"sameness/{g}_rate": _rate(v) for g, v in grains.items()}
        out.update(self.diversity())
        out[rl.PROGRAMS] = len(self.keys)
        out["degenerate/constant_output_rate"] = _rate([constant_output(t) for t in valid])
        dead = [t.metrics["dead_code"] for t in written if "dead_code" in t.metrics]
        out["degenerate/dead_code"] = sum(dead) / len(dead) if dead else None
        out["population/task_overlap"] = self.task_overlap()
        out["population/adapter_distance"] = adapter_distance
        self._extend(run_metrics, out, tasks)
        flags = self.flags()
        tags = {}
        for f in flags:
            out[f"monitor/{f.name}"] = None if f.fired is None else float(f.fired)
            if f.fired and f.name not in self.fired:
                self.fired[f.name] = step
                tags[rl.monitor_tag(f.name)] = f"fired at step {step}: {f.detail}"[:500]
        members = {tid: {f"sameness/{g}_rate": _rate(v) for g, v in grains_of.items()} for tid, grains_of in per_teacher.items()}
        return ({k: v for k, v in out.items() if v is not None},
                {m: {k: v for k, v in d.items() if v is not None} for m, d in members.items()}, tags)

    def diversity(self) -> dict[str, float | None]:
        n = len(self.keys)
        out = {rl.RAREFIED: None, rl.RECENT_RAREFIED: diversity.window_rarefied(self.keys, EQUAL_M, RECENT),
               "curriculum/chao1": diversity.chao1(diversity.counts(self.keys)).value if n else None}
        if n >= EQUAL_M:
            out[rl.RAREFIED] = diversity.rarefy(diversity.counts(self.keys), EQUAL_M, boot=0).value
        for kind in sorted(set(self.kinds)):
            of_kind = [k for k, kd in zip(self.keys, self.kinds) if kd == kind]
            if len(of_kind) >= EQUAL_M:
                out[f"{rl.RAREFIED}/{kind}"] = diversity.rarefy(diversity.counts(of_kind), EQUAL_M, boot=0).value
        return out

    def task_overlap(self) -> float | None:
        structures: dict[str, set] = defaultdict(set)
        for key, teacher in zip(self.keys[-RECENT:], self.teachers[-RECENT:]):
            structures[teacher].add(key)
        return monitors.task_overlap(structures)

    def _extend(self, run_metrics: dict, out: dict, tasks: list[Task]) -> None:
        s = self.series
        s["solve"].append(run_metrics.get(rl.SOLVE_RATE))
        s["ast_depth"].append(run_metrics.get("curriculum/ast_depth"))
        s["cyclomatic"].append(run_metrics.get("curriculum/cyclomatic"))
        s["diversity"].append(out.get(rl.RECENT_RAREFIED))
        s["invalid_rate"].append(1 - sum(t.valid for t in tasks) / len(tasks) if tasks else None)
        for name in ("constant_output_rate", "dead_code"):
            s[name].append(out.get(f"degenerate/{name}"))
        s["reproposed_rate"].append(out.get("sameness/reproposed_rate"))
        s["task_overlap"].append(out.get("population/task_overlap"))
        s["adapter_distance"].append(out.get("population/adapter_distance"))
        s["no_signal_share"].append(run_metrics.get("learn/no_signal_share"))  # learning.py's, via the run log
        s["mismatch_k3"].append(run_metrics.get("learn/mismatch_k3"))

    def flags(self) -> list[monitors.Flag]:
        s = self.series
        return [monitors.collapse(s["solve"], {"AST depth": s["ast_depth"], "cyclomatic": s["cyclomatic"]}, s["diversity"]),
                monitors.degenerate({k: s[k] for k in monitors.DEGENERATE}),
                monitors.convergence(s["task_overlap"], s["adapter_distance"]),
                monitors.no_signal(s["no_signal_share"]), monitors.out_of_sync(s["mismatch_k3"])]

    # ------------------------------------------------------------------ checkpoint
    def to_dict(self) -> dict:
        return {"keys": self.keys, "kinds": self.kinds, "teachers": self.teachers, "index": self.index.to_dict(),
                "series": self.series, "fired": self.fired}

    @classmethod
    def from_dict(cls, data: dict | None) -> "CurriculumTracker":
        tracker = cls()
        if data:
            tracker.keys, tracker.kinds, tracker.teachers = data["keys"], data["kinds"], data["teachers"]
            tracker.index = SamenessIndex.from_dict(data["index"])
            tracker.series = {name: data["series"].get(name, []) for name in SERIES}
            tracker.fired = dict(data["fired"])
        return tracker
