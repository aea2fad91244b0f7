"""CLI handlers: ``populora sandbox exec`` and ``populora bench verifier``.

    python -m populora.platform.sandbox.cli exec prog.py --timeout 2
    python -m populora.platform.sandbox.cli bench --json

``populora sandbox check TASK.json`` needs the task kinds, which live in training: it is a :class:`Command`
that ``populora.training.tasks.cli`` adds to this parser (platform never imports training).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from populora.platform.sandbox.asuser import as_user_command, ensure_user
from populora.platform.sandbox.bench import BENCH_PROGRAM, bench_verifier
from populora.platform.sandbox.pool import Sandbox


class UsageError(Exception):
    """Bad input from the user: printed on stderr with exit code 2."""


@dataclass(frozen=True)
class Command:
    """One ``populora sandbox`` subcommand; every one also gets ``--timeout`` and ``--memory-mb``."""
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def read_text(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} {path!r} not found: give the path of an existing file")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {what} {path!r}: {e}") from None


def _exec_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("program", help="path of the Python file to run")
    p.add_argument("--stdin", action="store_true", help="pass this command's stdin to the program")


def _exec(args) -> int:
    program = read_text(args.program, "program")
    with Sandbox(workers=1, timeout_s=args.timeout, memory_mb=args.memory_mb) as sb:
        r = sb.run(program, stdin=sys.stdin.read() if args.stdin else "")
    print(json.dumps({k: r.to_json()[k] for k in ("status", "stdout", "stderr", "returncode", "wall_s")}))
    return 0


EXEC = Command("exec", "run PROGRAM.py; prints one JSON object (status, stdout, stderr, returncode, wall_s)",
               _exec_arguments, _exec)


def _parser(commands: tuple[Command, ...]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora sandbox", description="Run or check untrusted Python in the sandbox.")
    sub = p.add_subparsers(dest="cmd", required=True)
    for command in commands:
        sp = sub.add_parser(command.name, help=command.help)
        command.add_arguments(sp)
        sp.add_argument("--timeout", type=float, default=5.0, help="wall-clock limit per execution, seconds")
        sp.add_argument("--memory-mb", type=int, default=512, help="address-space limit per execution, MB")
        sp.set_defaults(run=command.run)
    return p


def sandbox_main(argv: list[str], commands: tuple[Command, ...] = (EXEC,)) -> int:
    """Exit 0 whenever the sandbox worked (whatever the program did), 2 on bad input."""
    try:
        args = _parser(commands).parse_args(argv)
        return args.run(args)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    except UsageError as e:
        print(f"populora sandbox: error: {e}", file=sys.stderr)
        return 2


# ------------------------------------------------------------------------------------------- benchmark


def bench_verifier_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora bench verifier", description=bench_verifier_main.__doc__)
    p.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    p.add_argument("-n", type=int, default=3000, help="executions through the pool")
    p.add_argument("--naive-n", type=int, default=40, help="executions through subprocess.run")
    p.add_argument("--workers", type=int, default=None, help="pool size (default: one per CPU core)")
    p.add_argument("--as-user", metavar="USER", default=None,
                   help="(as root) run this benchmark as USER, created if missing: the unprivileged sandbox's figures")
    p.add_argument("--disable", metavar="LAYER", action="append", default=[],
                   help="turn a layer off (seccomp, userns), runs unconfined: what that layer costs")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.as_user:
        return _bench_as_user(args.as_user, [a for a in argv if a not in ("--as-user", args.as_user)])
    figures = bench_verifier(args.n, args.naive_n, args.workers, tuple(args.disable))
    cpu_ms, cores = figures["cpu_ms_per_exec"], os.cpu_count() or 1
    print(f"sandbox pool : {figures['execs_per_s']:8.1f} isolated execs/s  ({args.n} x {BENCH_PROGRAM!r}, "
          "results checked)")
    print(f"cpu cost     : {cpu_ms:8.3f} ms per execution, all processes -> {cores} idle cores could do "
          f"{figures['idle_capacity_execs_per_s']:.0f}/s")
    print(f"naive        : {figures['naive_execs_per_s']:8.1f} execs/s  (subprocess.run([python, '-c', ...]) x "
          f"{args.naive_n})")
    print(f"ratio        : {figures['ratio_vs_naive']:8.1f}x")
    print(f"fork limit   : {figures['fork_exit_per_s']:8.1f} bare fork+exit/s of the same workers -> pool at "
          f"{figures['fraction_of_fork_limit']:.2f} of it")
    print(f"page faults  : {figures['faults_per_exec']:8.1f} per execution vs {figures['fork_exit_faults_per_exec']:.1f} "
          f"per bare fork+exit; one copy-on-write fault costs {figures['cow_fault_us']:.2f} us of CPU here")
    print(f"fault bound  : {figures['fault_bound_fraction']:8.2f} of the fork limit if those extra faults were the "
          "pool's only extra cost (docs/performance.md)")
    print(f"mode         : uid {figures['uid']}, layers {figures['layers']}")
    if args.json:
        print(json.dumps(figures))
    return 0


def _bench_as_user(user: str, argv: list[str]) -> int:
    if os.geteuid() != 0:
        print("populora bench verifier: --as-user needs root; as a user, run it without --as-user", file=sys.stderr)
        return 2
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp",
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    cmd = as_user_command(ensure_user(user), [sys.executable, "-m", "populora.platform.sandbox.cli", "bench", *argv], env)
    return subprocess.run(cmd, cwd="/tmp").returncode


bench_verifier_main.__doc__ = "Isolated executions/s through the sandbox pool vs naive subprocess.run."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        return bench_verifier_main(argv[1:])
    return sandbox_main(argv)


if __name__ == "__main__":
    sys.exit(main())
