"""A league's inputs without a training run: an MLflow store holding a population run and its baseline with the
run-dir layout training leaves (config.yaml, checkpoints/step_N/state.json with members and buffers, adapter
dirs), and a scripted backend whose students have planted abilities and whose teachers write tasks of planted
difficulty: P(right answer) = sigmoid(ability - difficulty), so a league's fit can be checked against the truth."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from scipy.special import expit

from populora.platform import config as config_io
from populora.platform.backends import Generation
from populora.training import load_config
from populora.training.tasks.code_o import PROPOSE_PREFILL, SOLVE_PREFILL

TINY = ["model.tiny_random=true", "model.lora_rank=4", "tasks.format=direct", "tasks.kinds=[code_o]"]
PROGRAM = "def f(x):\n    return x * 1 + {c}"
FAMILY = re.compile(r"return x \* 1 \+ (\d+)")


def _member(mid: str, role: str, mu: float) -> dict:
    return {"id": mid, "role": role, "rank": 4, "generation": 0, "parents": [], "operator": "init", "born_step": 0,
            "mu": mu, "sigma": 8.0, "alive": True, "adapter_dir": "", "mlflow_run_id": ""}


def _seed_buffer(world: "World") -> dict:
    tasks = []
    for i in range(3):
        c = world.new_task(difficulty=0.0)
        tasks.append({"id": f"seed-code_o-{i}", "kind": "code_o", "program": PROGRAM.format(c=c), "input": "1",
                      "output": str(1 + c), "inputs": [], "outputs": [], "message": "", "teacher": "seed", "step": 0,
                      "valid": True, "reason": "ok", "metrics": {}})
    return {"code_o": tasks}


def training_run(tracker, world: "World", tmp: Path, kind: str, members: dict[str, str], steps=(1, 2),
                 baseline: str = "") -> str:
    """A run of ``kind`` with ``members`` ({id: role}) alive at checkpoints ``steps``; each member's adapter dir at
    each step is registered in ``world`` (the scripted backend's planted truth keys on it)."""
    run_dir = tmp / f"run_{kind}"
    rid = tracker.start_run("league-test", kind, tags={"populora.kind": kind, "populora.status": "finished",
                                                        "populora.run_dir": str(run_dir), "populora.baseline_run": baseline})
    overrides = TINY + (["population.single_agent=true"] if kind == "baseline" else [])
    cfg = load_config(None, overrides)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(config_io.dump(cfg))
    tracker.log_params(rid, config_io.flatten(cfg))
    for step in steps:
        ck = run_dir / "checkpoints" / f"step_{step:06d}"
        for m in members:
            adapter = ck / "adapters" / m
            adapter.mkdir(parents=True)
            (adapter / "adapter_config.json").write_text("{}")
        state = {"step": step, "population": {"members": [_member(m, r, 25.0 + step) for m, r in members.items()],
                                              "next_index": {}},
                 "buffers": _seed_buffer(world)}
        (ck / "state.json").write_text(json.dumps(state))
    tracker.end_run(rid)
    return rid


class World:
    """The planted truth: ability per adapter dir (students), a difficulty mean per adapter dir (teachers), the
    difficulty of every task written (by its constant), and the share of a teacher's proposals that are invalid."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.ability: dict[str, float] = {"": 0.0}      # adapter dir -> ability ("" = the base model)
        self.teacher_mean: dict[str, float] = {"": 0.0}
        self.invalid: dict[str, float] = {}
        self.difficulty: dict[int, float] = {}
        self.owner: dict[int, str] = {}

    def new_task(self, difficulty: float, owner: str = "seed") -> int:
        c = 100 + len(self.difficulty)
        self.difficulty[c], self.owner[c] = difficulty, owner
        return c


class ScriptedBackend:
    """Stands in for the model: teachers' rows write ``x * 1 + c`` tasks (a planted difficulty each, some of them
    invalid), students' rows answer right with probability sigmoid(ability - difficulty). Counts every row."""

    def __init__(self, world: World, fail_after: int | None = None):
        self.world, self.fail_after = world, fail_after
        self.tokenizer = SimpleNamespace(eos_token_id=0, pad_token_id=0)
        self.dirs: dict[str, str] = {}  # adapter name -> adapter dir
        self.calls = 0
        self.student_rows: list[tuple[str | None, int]] = []  # (adapter, task constant) of every answer row
        self.teacher_rows = 0
        self.rng = np.random.default_rng(1)

    @property
    def adapters(self) -> list[str]:
        return list(self.dirs)

    def add_adapter(self, name, from_dir=None, seed=None):
        self.dirs[name] = str(from_dir)

    def encode_chat(self, messages, prefill=""):
        return "\n".join(m["content"] for m in messages) + "\n" + prefill

    def _dir(self, adapter):
        return "" if adapter is None else self.dirs[adapter]

    def generate(self, prompts, adapters, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, stop=(), batch_size=16):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed (scripted)")
        self.calls += 1
        out = []
        for prompt, adapter in zip(prompts, adapters):
            d = self._dir(adapter)
            if prompt.endswith(PROPOSE_PREFILL):
                self.teacher_rows += 1
                if self.rng.random() < self.world.invalid.get(d, 0.0):
                    text = "oops"  # no program: a format failure
                else:
                    c = self.world.new_task(self.world.teacher_mean[d] + self.rng.normal(0, 0.4), d)
                    text = f"x):\n    return x * 1 + {c}\n```\n```input\n{int(self.rng.integers(1, 9))}\n```"
            else:
                assert prompt.endswith(SOLVE_PREFILL), prompt[-80:]
                c = int(FAMILY.findall(prompt)[-1])
                x = int(re.findall(r"What does f\((\d+)\) return", prompt)[-1])
                self.student_rows.append((adapter, c))
                right = self.rng.random() < expit(self.world.ability[d] - self.world.difficulty[c])
                text = f"{x + c if right else x + c + 1}\n```"
            out.append(Generation(prompt, text, [1], [1]))
        return out
