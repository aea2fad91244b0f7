"""Judge the corpus (``azr_corpus.py``) twice: by the AZR reference (``azr.py``) and by our training path under a
preset's config (``parse_proposal`` + ``validate``, ``solve`` with a scripted backend, ``make_verifier``,
``assign_rewards``), and say where the verdicts differ.

Run by hand for the figures per category: ``PYTHONPATH=.:tests python -m reference.differential configs/paper-4t4s.yaml``.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from reference import azr
from reference.azr_corpus import EXTRA_SOURCES, TASKS, Case, corpus, f_proposal, proposal

from populora.platform.backends.base import Generation
from populora.platform.sandbox.values import parse_literal
from populora.training.phases.buffers import TaskBuffers
from populora.training.config import load_config
from populora.training.loop import make_verifier
from populora.training.phases.rollout import Rollout
from populora.training.phases.scoring import assign_rewards
from populora.training.phases.solve import solve
from populora.training.tasks import KINDS, Task
from populora.training.phases.validate import program_rules, validate

SPECS = {**TASKS, **EXTRA_SOURCES}
TIMEOUT_S = 1.5  # both sides, instead of the presets' 10 s: a timeout is judged the same, and the test stays short
# TasksConfig fields that do not change a verdict (sampling, buffers, budgets): presets differing only there share one run
NOT_JUDGING = {"kinds", "seed_buffer", "seed_shared", "seed_rounds", "tasks_per_teacher", "references", "buffer_size",
               "buffer_full", "code_f_pool", "rollouts", "answers_per_task", "max_new_tokens_propose",
               "max_new_tokens_solve", "temperature", "top_p"}


def rules_key(cfg) -> str:
    """What of a config decides verdicts: presets with equal keys judge every case alike."""
    tasks = {k: v for k, v in cfg.tasks.model_dump().items() if k not in NOT_JUDGING}
    return repr(sorted(tasks.items())) + repr(sorted(cfg.reward.model_dump().items()))


def preset(path: str):
    return load_config(path, [f"tasks.timeout_s={TIMEOUT_S}"])


# ------------------------------------------------------------------------------------------- reference


def reference_verdicts(cases: list[Case], timeout_s: float = TIMEOUT_S, workers: int = 2) -> dict[str, object]:
    """The reference's verdicts, the corpus shared out over ``workers`` executors (each its own child process)."""
    with ThreadPoolExecutor(workers) as pool:
        parts = pool.map(lambda i: _reference(cases[i::workers], timeout_s), range(workers))
    return {k: v for part in parts for k, v in part.items()}


def _reference(cases: list[Case], timeout_s: float) -> dict[str, object]:
    ex = azr.Executor(timeout_s)
    try:
        programs = {name: azr.judge_proposal(ex, "code_o", proposal(s.program, s.input)).task for name, s in SPECS.items()}
        tasks = {}

        def task(name: str, kind: str):
            if (name, kind) not in tasks:
                spec, source = SPECS[name], programs[name]
                p = (azr.judge_proposal(ex, "code_f", f_proposal(spec.f_inputs), source) if kind == "code_f"
                     else azr.judge_proposal(ex, kind, proposal(spec.program, spec.input)))
                tasks[name, kind] = p.task if p.valid and p.format_ok else None
            return tasks[name, kind]

        out = {}
        for c in cases:
            if c.side == "teacher":
                p = azr.judge_proposal(ex, c.kind, c.response, programs.get(c.task))
                ok = p.valid and p.format_ok
                out[c.id] = ("valid", p.task.outputs if c.kind == "code_f" else [p.task.output]) if ok else ("invalid",)
            elif c.side == "student":
                out[c.id] = azr.solver_reward(ex, task(c.task, c.kind), c.response)
            else:
                t = task(c.task, c.kind)
                acc = azr.solve_rate(ex, t, c.responses)
                out[c.id] = (azr.proposer_reward(azr.Proposal(True, True, t), acc), acc)
        return out
    finally:
        ex.close()


# ------------------------------------------------------------------------------------------- ours


class Scripted:
    """The model backend, answering every prompt in order from a script, cut at the stop strings as a real
    backend cuts a completion (the stop string kept)."""

    def __init__(self, replies: list[str]):
        self.replies = iter(replies)

    def generate(self, prompts, adapters, max_new_tokens, stop=(), **kwargs):
        return [Generation(p, cut(next(self.replies), stop), [1], [2]) for p in prompts]


def cut(text: str, stop) -> str:
    ends = [text.index(s) + len(s) for s in stop if s in text]
    return text[:min(ends)] if ends else text


def _propose(verifier, cfg, items: list[tuple[str, str, str, str]]) -> list[Task]:
    """(id, kind, completion, source program) -> tasks after parse_proposal + validate (one sandbox batch)."""
    tc, tasks = cfg.tasks, []
    stop = ("</answer>",) if tc.format == "azr" and tc.stop_at_answer else ()
    for tid, kind, text, program in items:
        task = KINDS[kind].parse_proposal(cut(text, stop), Task(tid, kind, program=program), tc)
        tasks.append(task)
    validate(verifier, tasks, TaskBuffers(list(KINDS), 100000), set(), program_rules(tc))
    return tasks


def our_verdicts(cases: list[Case], cfg) -> dict[str, object]:
    verifier = make_verifier(cfg)
    sources = {t.id: t for t in _propose(verifier, cfg, [(n, "code_o", proposal(s.program, s.input), "")
                                                           for n, s in SPECS.items()])}
    source = lambda name: sources[name].program if name in sources and sources[name].valid else ""  # noqa: E731
    needed = {(c.task, c.kind) for c in cases if c.side != "teacher"}
    first = [(c.id, c.kind, c.response, "") for c in cases if c.side == "teacher" and c.kind != "code_f"]
    first += [(f"task {n} {k}", k, proposal(SPECS[n].program, SPECS[n].input), "") for n, k in needed if k != "code_f"]
    second = [(c.id, c.kind, c.response, source(c.task)) for c in cases if c.side == "teacher" and c.kind == "code_f"]
    second += [(f"task {n} {k}", k, f_proposal(SPECS[n].f_inputs), source(n)) for n, k in needed if k == "code_f"]
    proposed = {t.id: t for t in _propose(verifier, cfg, first) + _propose(verifier, cfg, second)}
    out = {}
    for c in cases:
        if c.side == "teacher":
            t = proposed[c.id]
            out[c.id] = ("valid", t.outputs if c.kind == "code_f" else [t.output]) if t.valid else ("invalid",)
    tasks, answerers, replies, proposals = [], {}, [], []
    for c in cases:
        if c.side == "teacher":
            continue
        base = proposed[f"task {c.task} {c.kind}"]
        if not base.valid:
            out[c.id] = "task invalid"
            continue
        tasks.append(replace(base, id=c.id))
        rs = [c.response] if c.side == "student" else c.responses
        answerers[c.id], replies = ["s"] * len(rs), replies + rs
        if c.side == "estimate":
            proposals.append(Rollout("t", "teacher", c.kind, c.id, [1], [2], ""))
    answers = solve(Scripted(replies), verifier, tasks, answerers, cfg, seed=0)
    rates = assign_rewards(tasks, proposals, answers, cfg)
    for a in answers:
        out[a.task_id] = a.reward
    for p in proposals:
        out[p.task_id] = (p.reward, rates[p.task_id])
    return out


# ------------------------------------------------------------------------------------------- comparison


def same_gold(azr_text: str, ours: str | None) -> bool:
    """AZR's gold (repr text) and ours (canonical text) name the same value of the same type."""
    if not azr_text or ours is None:
        return False
    value = parse_literal(ours)
    try:
        theirs = ast.literal_eval(azr_text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return repr(value) == azr_text
    return type(theirs) is type(value) and (theirs == value or repr(theirs) == repr(value))


def agree(ref, ours) -> bool:
    if isinstance(ref, tuple) and ref and ref[0] in ("valid", "invalid"):
        if not isinstance(ours, tuple) or ref[0] != ours[0]:
            return False
        return ref[0] == "invalid" or (len(ref[1]) == len(ours[1]) and all(map(same_gold, ref[1], ours[1])))
    if isinstance(ref, tuple):
        return isinstance(ours, tuple) and all(abs(a - b) < 1e-9 for a, b in zip(ref, ours))
    return isinstance(ours, float) and abs(ref - ours) < 1e-9


def differences(cases: list[Case], ref: dict, ours: dict) -> dict[str, tuple]:
    return {c.id: (ref[c.id], ours[c.id]) for c in cases if not agree(ref[c.id], ours[c.id])}


def by_category(cases: list[Case], diff: dict) -> dict[str, tuple[int, int]]:
    total, bad = Counter(c.category for c in cases), Counter(c.category for c in cases if c.id in diff)
    return {k: (total[k] - bad[k], total[k]) for k in sorted(total)}


def main(paths: list[str]) -> None:
    cases = corpus()
    ref = reference_verdicts(cases)
    for path in paths:
        diff = differences(cases, ref, our_verdicts(cases, preset(path)))
        print(f"== {path}: {len(cases) - len(diff)}/{len(cases)} agree")
        for cat, (ok, n) in by_category(cases, diff).items():
            print(f"  {cat:18s} {ok:4d}/{n:<4d} {100 * ok / n:5.1f}%")
        for cid, (r, o) in diff.items():
            print(f"  - {cid}: AZR {str(r)[:90]} | ours {str(o)[:90]}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["configs/paper-4t4s.yaml"])
