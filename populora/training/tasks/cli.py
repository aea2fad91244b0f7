"""``populora sandbox check TASK.json``: judge one task (or answer) as training would, kinds from ``KINDS``.

    python -m populora.training.tasks.cli check task.json
    python -m populora.training.tasks.cli exec prog.py      # the sandbox's own commands work here too
"""

from __future__ import annotations

import json
import sys

from populora.platform.sandbox.cli import EXEC, Command, UsageError, read_text, sandbox_main as _sandbox_main
from populora.platform.sandbox.pool import Sandbox
from populora.platform.verifier import Validate, Verifier
from populora.training.tasks import KINDS

TASK_KEYS = {"validate": ("program", "input"), **{name: kind.json_keys for name, kind in KINDS.items()}}
TASK_FORMS = (
    '{"type": "validate", "program": P, "input": I} | {"type": "code_o", "program": P, "input": I, "answer": O} | '
    '{"type": "code_i", "program": P, "output": O, "answer": I} | '
    '{"type": "code_f", "program": P, "inputs": [I, ...], "answer": P2}'
)


def load_task(path: str) -> dict:
    """Read and check a TASK.json; ``UsageError`` says what is wrong and what the file should look like."""
    try:
        task = json.loads(read_text(path, "task file"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e}); expected one of: {TASK_FORMS}") from None
    if not isinstance(task, dict):
        raise UsageError(f"{path}: expected a JSON object, one of: {TASK_FORMS}")
    kind = task.get("type")
    if kind not in TASK_KEYS:
        raise UsageError(f"{path}: unknown or missing \"type\" {kind!r}; use one of {', '.join(TASK_KEYS)}")
    missing = [k for k in TASK_KEYS[kind] if k not in task]
    if missing:
        raise UsageError(f"{path}: a {kind} task needs key(s) {', '.join(map(repr, missing))}; form: {TASK_FORMS}")
    for key in TASK_KEYS[kind]:
        want = list if key == "inputs" else str
        if not isinstance(task[key], want) or (want is list and not all(isinstance(x, str) for x in task[key])):
            raise UsageError(f"{path}: {key!r} must be a {'list of strings' if want is list else 'string'}")
    return task


def job(task: dict):
    """The verifier job of a checked TASK.json record."""
    if task["type"] == "validate":
        return Validate(task["program"], task["input"])
    return KINDS[task["type"]].check_json(task)


def _check_arguments(p) -> None:
    p.add_argument("task", help=f"path of a JSON file, one of: {TASK_FORMS}")


def _check(args) -> int:
    task = load_task(args.task)
    with Sandbox(workers=1, timeout_s=args.timeout, memory_mb=args.memory_mb) as sb:
        v = Verifier(sb, timeout_s=args.timeout, memory_mb=args.memory_mb).check(job(task))
    out = {"valid": v.valid, "correct": v.correct, "status": v.status, "reason": v.reason}
    if v.output is not None:
        out["output"] = v.output
    print(json.dumps(out))
    return 0


CHECK = Command("check", "check TASK.json; prints {valid, correct, status, reason}", _check_arguments, _check)


def sandbox_main(argv: list[str]) -> int:
    """``populora sandbox exec|check``: exit 0 whenever the sandbox worked, 2 on bad input."""
    return _sandbox_main(argv, (EXEC, CHECK))


if __name__ == "__main__":
    sys.exit(sandbox_main(sys.argv[1:]))
