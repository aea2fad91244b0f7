"""``populora prompts``: print exactly what a run would send to teachers and students, per kind and role.

    populora prompts --config configs/paper-4t4s.yaml [--kind code_f] [--role teacher] [--json]

References come from the step-0 buffer (AZR's seed task, validated in the sandbox), the state every teacher
prompt starts from before the base model's seed proposals fill the buffers; no model is loaded. The messages are
shown in the run's ``tasks.template``: azr, one plain message (AZR's R1 text around the task), which the run sends
as it is, followed by the prefill; chat, the turns the model's chat template is applied to at run time.
``--json``: the last line is one object ``{"format", "template", "prompts": [{"kind", "role", "messages",
"prefill"}]}``.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from populora.platform import config as config_io
from populora.platform.config import ConfigError
from populora.platform.sandbox.verifier import Verifier
from populora.training.phases.buffers import buffer_kinds
from populora.training.config import TrainConfig
from populora.training.phases.seeding import initial_buffers
from populora.training.tasks import KINDS, Task
from populora.training.tasks.prompts import REDUCTION_NOTE, frame

ROLES = ("teacher", "student")


def build(cfg, kinds: list[str], roles: list[str], verifier) -> dict:
    """The prompts of the config's format, one per (kind, role), drawing references as a run's first step would."""
    tc = cfg.tasks
    buffers = initial_buffers(verifier, buffer_kinds(tc.kinds), tc.buffer_size, tc.buffer_full, tc.code_f_pool)
    rng = np.random.default_rng(cfg.seed)
    prompts = []
    for kind in kinds:
        for role in roles:
            if role == "teacher":
                task = Task(id="shown", kind=kind, program="", teacher="teacher", step=1)
                prompt = KINDS[kind].teacher_prompt(task, buffers, rng, tc)
            else:  # the student is shown a valid task of the kind: the buffer's seed task
                prompt = KINDS[kind].student_prompt(buffers.sample(kind, 1, rng)[0], tc.format)
            messages, prefill = frame(prompt, tc.format, tc.template)
            prompts.append({"kind": kind, "role": role, "messages": messages, "prefill": prefill})
    return {"format": tc.format, "template": tc.template, "prompts": prompts}


def text(shown: dict) -> str:
    lines = [f"tasks.format: {shown['format']}" + (f"  ({REDUCTION_NOTE})" if shown["format"] == "direct" else ""),
             f"tasks.template: {shown['template']}" + ("  (plain text, sent as shown)" if shown["template"] == "azr" else
                                                       "  (the model's chat template is applied to these turns)")]
    for p in shown["prompts"]:
        lines += ["", f"{'=' * 20} {p['kind']} / {p['role']} {'=' * 20}"]
        for m in p["messages"]:
            lines += [f"[{m['role']}]", m["content"]]
        lines += ["[assistant, prefilled]", p["prefill"]]
    return "\n".join(lines)


def prompts_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora prompts", description="print the prompts a run would send, per kind and role")
    p.add_argument("--config", help="YAML preset, e.g. configs/paper-4t4s.yaml (default: built-in defaults)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--kind", choices=list(KINDS), help="only this task kind (default: the config's tasks.kinds)")
    p.add_argument("--role", choices=ROLES, help="only this role (default: both)")
    p.add_argument("--json", action="store_true", help='last line: {"format", "template", "prompts": [{"kind", "role", "messages", "prefill"}]}')
    args = p.parse_args(argv)
    try:
        cfg = config_io.load(TrainConfig, args.config, list(args.set))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    kinds = [args.kind] if args.kind else list(cfg.tasks.kinds)
    verifier = Verifier(timeout_s=cfg.tasks.timeout_s, memory_mb=cfg.tasks.memory_mb)
    shown = build(cfg, kinds, [args.role] if args.role else list(ROLES), verifier)
    print(text(shown))
    if args.json:
        print(json.dumps(shown))
    return 0


if __name__ == "__main__":
    sys.exit(prompts_main(sys.argv[1:]))
