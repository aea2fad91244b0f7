"""``populora sandbox check TASK.json``: judge one task (or answer) as training would, kinds from ``KINDS``.

    python -m populora.training.tasks.cli check task.json
    python -m populora.training.tasks.cli check task.json --config paper-4t4s   # under a preset's rules
    python -m populora.training.tasks.cli exec prog.py      # the sandbox's own commands work here too
"""

from __future__ import annotations

import json
import sys

from populora.platform.sandbox.cli import EXEC, Command, UsageError, read_text, sandbox_main as _sandbox_main
from populora.platform.sandbox.pool import Sandbox
from populora.platform.sandbox.verifier import ProgramRules, Validate, Verifier
from populora.platform.config import ConfigError
from populora.training.config import TasksConfig, TrainConfig, load_config, presets
from populora.training.tasks import KINDS
from populora.training.tasks.prompts import format_failure
from populora.training.phases.validate import program_rules

TASK_KEYS = {"validate": ("program", "input"), **{name: kind.json_keys for name, kind in KINDS.items()}}
TASK_FORMS = (
    '{"type": "validate", "program": P, "input": I} | {"type": "code_o", "program": P, "input": I, "answer": O} | '
    '{"type": "code_i", "program": P, "output": O, "answer": I} | '
    '{"type": "code_f", "program": P, "inputs": [I, ...], "answer": P2}; '
    'instead of "answer", "completion": a student\'s whole completion, read in the preset\'s format'
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
    if "completion" in task and kind != "validate":
        task.setdefault("answer", "")  # the answer is parsed from the completion (``_check``)
        if not isinstance(task["completion"], str):
            raise UsageError(f"{path}: 'completion' must be a string")
    missing = [k for k in TASK_KEYS[kind] if k not in task]
    if missing:
        raise UsageError(f"{path}: a {kind} task needs key(s) {', '.join(map(repr, missing))}; form: {TASK_FORMS}")
    for key in TASK_KEYS[kind]:
        want = list if key == "inputs" else str
        if not isinstance(task[key], want) or (want is list and not all(isinstance(x, str) for x in task[key])):
            raise UsageError(f"{path}: {key!r} must be a {'list of strings' if want is list else 'string'}")
    return task


def job(task: dict, tc: TasksConfig | None = None):
    """The verifier job of a checked TASK.json record, under the rules of ``tc`` (a preset's ``tasks``; None:
    the sandbox's defaults)."""
    rules = program_rules(tc) if tc is not None else ProgramRules()
    if task["type"] == "validate":
        return Validate(task["program"], task["input"], rules)
    check = KINDS[task["type"]].check_json(task, tc.answer_check if tc is not None else "azr")
    check.rules = rules
    return check


def load_preset(name: str) -> TrainConfig:
    """A preset by name (``configs/NAME.yaml``) or path; ``UsageError`` names the presets there are."""
    path = presets().get(name, name)
    try:
        return load_config(path)
    except (ConfigError, OSError) as e:
        raise UsageError(f"--config {name}: {e}; presets: {', '.join(presets())}") from None


def _check_arguments(p) -> None:
    p.add_argument("task", help=f"path of a JSON file, one of: {TASK_FORMS}")
    p.add_argument("--config", metavar="PRESET", default=None,
                   help="judge under this preset's task rules, format, time and memory limits (a configs/ name or a path)")


def _check(args) -> int:
    task = load_task(args.task)
    cfg = load_preset(args.config) if args.config else None
    tc = cfg.tasks if cfg is not None else None
    timeout, memory = (tc.timeout_s, tc.memory_mb) if tc is not None else (args.timeout, args.memory_mb)
    if "completion" in task and task["type"] != "validate":
        fmt = tc.format if tc is not None else TasksConfig().format
        answer = KINDS[task["type"]].parse_answer(task["completion"], fmt)
        if answer is None:  # a format error: say whether the layout or the answer itself failed
            print(json.dumps({"valid": True, "correct": False, "status": "format",
                              "reason": format_failure(task["type"], task["completion"], fmt)}))
            return 0
        task["answer"] = answer
    with Sandbox(workers=1, timeout_s=timeout, memory_mb=memory) as sb:
        v = Verifier(sb, timeout_s=timeout, memory_mb=memory).check(job(task, tc))
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
