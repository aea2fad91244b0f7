"""Run untrusted Python in isolated, throw-away processes. One module per side of each process boundary:

- ``pool``: the trainer's side, :class:`Sandbox`, a pool of pre-warmed workers (``run``, ``run_many``, ``execute``);
- ``worker``: the long-lived worker process that forks one child per execution;
- ``child``: what runs in that child, locked down, and the program itself;
- ``kernel``: the kernel calls behind the isolation (namespaces, rlimits, seccomp, privilege drop);
- ``values``: canonical text of values, and the one literal grammar that reads it back;
- ``cli`` / ``bench``: ``populora sandbox exec`` and ``populora bench verifier``;
- ``asuser``: running a command (the suite, the bench) as an unprivileged user;
- ``verifier`` / ``ray_verifier``: generic checks on top of the pool (static bans, ``f(args)`` run to canonical
  values, determinism), here or spread over Ray actors; what a task kind needs is the kind's (``training.tasks``).

    from populora.platform.sandbox import Sandbox
    with Sandbox(timeout_s=2) as sb:
        r = sb.run("print(1 + 1)")          # ExecResult(status="ok", stdout="2\\n", ...)

The public names are loaded on first use (PEP 562): worker processes import ``sandbox.worker``, which runs this
file first, and everything a worker imports stays importable by the sandboxed programs it forks (their chroot
holds nothing else), so the pool's threads, subprocess and tempfile must not come along.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Sandbox": "pool", "ExecRequest": "pool", "ExecResult": "pool", "STATUSES": "pool", "get_sandbox": "pool",
    "sweep_stale_dirs": "pool", "SandboxUnavailable": "pool", "ESSENTIAL": "pool",
    "canonical": "values", "canonical_literal": "values", "parse_literal": "values",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
