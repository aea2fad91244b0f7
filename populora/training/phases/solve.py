"""Solve phase: the students the answer plan names answer each valid task (one batched generation over all
students' adapters; ``matchmaking.answer_plan``); the sandbox checks every parsed answer."""

from __future__ import annotations

from populora.training.phases.rollout import Rollout
from populora.training.tasks import KINDS, Task
from populora.training.tasks.prompts import answer_content, format_failure, render, stop
from populora.training.phases.validate import program_rules


def solve(backend, verifier, tasks: list[Task], answerers: dict[str, list[str]], cfg, seed: int) -> list[Rollout]:
    """``answerers``: task id -> the student of each answer the task gets."""
    tc = cfg.tasks
    plans = []  # (student id, task, prompt)
    for task in tasks:
        if not task.valid:
            continue
        prompt = render(backend, KINDS[task.kind].student_prompt(task, tc.format), tc.format, tc.template)
        plans += [(student, task, prompt) for student in answerers.get(task.id, [])]
    if not plans:
        return []
    gens = backend.generate(
        [p for _, _, p in plans], [s for s, _, _ in plans], tc.max_new_tokens_solve,
        temperature=tc.temperature, top_p=tc.top_p, seed=seed, stop=stop(tc.format, "student", tc.stop_at_answer),
    )
    rollouts, requests, estimates, rules = [], [], [], program_rules(tc)
    for (student, task, _), gen in zip(plans, gens):
        kind = KINDS[task.kind]
        answer = kind.parse_answer(gen.text, tc.format)
        r = Rollout(student, "student", task.kind, task.id, gen.prompt_ids, gen.completion_ids, gen.text, answer=answer,
                    generator_logp=gen.logprobs)
        rollouts.append(r)
        if answer is not None:
            requests.append((r, _check(kind, task, answer, tc, rules)))
            continue
        r.verdict = format_failure(kind.name, gen.text, tc.format)
        if tc.format == "azr" and not tc.estimate_format_check:  # AZR's estimate reads the answer all the same
            content = kind.read_answer(answer_content(gen.text), tc.format)
            r.solved = False
            if content is not None:
                estimates.append((r, _check(kind, task, content, tc, rules)))
    verdicts = verifier.check_many([req for _, req in requests + estimates]) if requests or estimates else []
    for (r, _), verdict in zip(requests, verdicts):
        r.correct = bool(verdict.correct)
        r.verdict = "correct" if r.correct else f"{verdict.status}: {verdict.reason}"[:200]
    for (r, _), verdict in zip(estimates, verdicts[len(requests):]):
        r.solved = bool(verdict.correct)
    return rollouts


def _check(kind, task: Task, answer: str, tc, rules):
    check = kind.check_answer(task, answer, tc.answer_check)
    check.rules = rules  # the task passed these rules; its program is checked under them again
    return check

