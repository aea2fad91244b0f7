"""Every command the README and docs/*.md show in a code block exists as written: each ``populora ...`` line's
command (and sub-command) is one the CLI has and each of its flags one that command's parser accepts; each
``make TARGET`` a target of the Makefile. A stale doc fails here naming its file and line.

The parsers are read in this process, not run: ``populora.cli.main`` dispatches the doc's argv as the command would
(the command's own module builds its parser), and the first ``parse_known_args`` call hands its parser back here
before anything runs. The doc's tokens are then checked against that parser's actions: flags by name, sub-commands
and positional choices by value (``a|b`` alternatives each). Values are placeholders (``RUN_ID``, ``N``), so they are
not parsed; brackets (``[--json]``) only mark what is optional. As a dry run of the settings, each ``--set KEY=...`` and
``--grid KEY=...`` key must be a field of the command's config, and each ``--config configs/X.yaml`` a shipped file."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from populora import cli
from populora.evaluation.config import EvalConfig, ReportConfig
from populora.platform.config import ConfigError, apply_override
from populora.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")  # VAR=value before a command
OPTION = re.compile(r"^--?[A-Za-z][\w-]*(=.*)?$")  # a flag, not an arrow (-->) or a number (-3)


def code_lines(path: Path):
    """(line number, text) of each line in the file's fenced code blocks, a backslash continuation joined to the
    line it continues (numbered by its first line), a trailing ``# comment`` removed."""
    block, pending = False, None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            block, pending = not block, None
            continue
        if not block:
            continue
        text = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].rstrip()
        if pending:
            number, text = pending[0], f"{pending[1]} {text.strip()}"
        if text.endswith("\\"):
            pending = (number, text[:-1].rstrip())
            continue
        pending = None
        if text.strip():
            yield number, text.strip()


def commands(text: str):
    """(kind, argv) of each populora or make command in one line of a code block: ``populora`` (or a path ending in
    it, or ``python -m populora``) after any VAR=value, or ``make``; a shell pipe to another program ends it, a
    ``|`` followed by a flag is an alternative of the same command (``--run R | --sweep S``)."""
    for segment in re.split(r"&&|;", text):
        try:
            tokens = shlex.split(segment)
        except ValueError:  # an unbalanced quote in prose-like text
            tokens = segment.split()
        while tokens and ENV.match(tokens[0]):
            tokens = tokens[1:]
        if not tokens:
            continue
        head = tokens[0]
        if head == "make":
            yield "make", tokens[1:]
        elif head == "populora" or head.endswith("/populora"):
            yield "populora", _own(tokens[1:])
        elif re.fullmatch(r"(\S*/)?python3?", head) and tokens[1:3] in (["-m", "populora"], ["-m", "populora.cli"]):
            yield "populora", _own(tokens[3:])


def _own(tokens: list[str]) -> list[str]:
    """The command's own tokens: brackets and ``...`` dropped, up to a pipe into another program or a redirect."""
    out = []
    for i, token in enumerate(tokens):
        if token in (">", ">>", "2>&1", "->", "-->") or token.startswith((">", "2>")):
            break
        if token == "|":
            if i + 1 < len(tokens) and tokens[i + 1].lstrip("[").startswith("-"):
                continue  # an alternative set of flags of the same command
            break
        token = token.replace("[", "").replace("]", "")
        if token and token != "..." and token != "|":
            out.append(token)
    return out


class Parsed(BaseException):
    """Raised by the first parse: carries the parser and the argv it was given (BaseException: no command's
    ``except Exception`` or ``except SystemExit`` catches it)."""

    def __init__(self, parser: argparse.ArgumentParser, argv: list[str]):
        super().__init__(parser.prog)
        self.parser, self.argv = parser, list(argv)


def parser_of(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser ``populora ARGV`` would parse its argv with, and that argv (a dispatching command strips its own
    name, e.g. ``bench eval``); nothing runs, and the signal handlers a command installs first are put back."""
    def capture(self, args=None, namespace=None):
        raise Parsed(self, sys.argv[1:] if args is None else args)

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(argparse.ArgumentParser, "parse_known_args", capture)
            cli.main(list(argv))
    except Parsed as parsed:
        return parsed.parser, parsed.argv
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        sys.unraisablehook = hook
    raise AssertionError(f"populora {' '.join(argv)} returned without parsing its arguments")


def problems(parser: argparse.ArgumentParser, tokens: list[str]) -> list[str]:
    """What in ``tokens`` the parser does not know: a flag it has no action for, a sub-command or a positional
    choice it does not offer. Values are not parsed (they are placeholders)."""
    found: list[str] = []
    positionals = [a for a in parser._actions if not a.option_strings]
    at = i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("-") and len(token) > 1:
            if not OPTION.match(token):
                break  # not a flag: the command's text ends here (a diagram's arrow)
            flag = token.split("=")[0]
            action = parser._option_string_actions.get(flag)
            i += 1
            if action is None:
                known = sorted(s for s in parser._option_string_actions if s.startswith("--"))
                found.append(f"`{parser.prog}` has no flag {flag} (its flags: {' '.join(known)})")
            elif "=" not in token:
                i += _values(action, tokens[i:])
            continue
        if at < len(positionals):
            action = positionals[at]
            offered = action.choices or {}
            unknown = [alt for alt in token.split("|") if offered and alt not in offered]
            if unknown:
                what = "command" if isinstance(action, argparse._SubParsersAction) else f"choice for {action.dest}"
                found.append(f"`{parser.prog}` has no {what} {', '.join(unknown)} (it has: {' '.join(offered)})")
            if isinstance(action, argparse._SubParsersAction):
                for alt in token.split("|"):
                    if alt in offered:
                        found += problems(offered[alt], tokens[i + 1:])
                return found
            if action.nargs not in ("*", "+", argparse.REMAINDER):
                at += 1
        i += 1
    return found


def _values(action: argparse.Action, rest: list[str]) -> int:
    """How many of ``rest`` are the values of ``action``'s flag."""
    nargs = action.nargs
    if nargs == 0:
        return 0
    if isinstance(nargs, int):
        return nargs
    if nargs in (None, "?"):
        return 1 if rest and (nargs is None or not rest[0].startswith("-")) else 0
    n = 0
    while n < len(rest) and not rest[n].startswith("-"):
        n += 1
    return n


SCHEMAS = {"train": TrainConfig, "sweep": TrainConfig, "plan": TrainConfig, "eval": EvalConfig, "report": ReportConfig}
PLACEHOLDER = re.compile(r"^(KEY|key|[A-Z_]+)$")


def settings(argv: list[str]) -> list[str]:
    """The ``--set`` / ``--grid`` keys that are not fields of the command's config, and the ``--config configs/...``
    files that do not exist."""
    found, schema = [], SCHEMAS.get(argv[0]) if argv else None
    for flag, value in zip(argv, argv[1:]):
        if flag == "--config" and value.startswith("configs/") and not (ROOT / value).is_file():
            found.append(f"there is no {value}")
        if flag not in ("--set", "--grid") or schema is None or "=" not in value:
            continue
        for key in value.split("=")[0].split(","):  # --grid a,b=1:1,4:4 varies two keys together
            if PLACEHOLDER.match(key):
                continue
            try:
                apply_override({}, key.split("."), "x", schema)
            except ConfigError as err:
                found.append(f"{flag} {key}: {err}")
    return found


def make_targets() -> set[str]:
    """The Makefile's targets, from make's own database (-p) of the Makefile read with no goal run (-q, a goal
    that does not exist: no recipe, not even a recursive make, runs)."""
    out = subprocess.run(["make", "-pRrq", "-C", str(ROOT), "__no_such_goal__"], capture_output=True, text=True,
                         timeout=120).stdout.splitlines()
    targets = set()
    for i, line in enumerate(out):
        m = re.match(r"^([A-Za-z0-9][\w.\-/]*(?: [\w.\-/]+)*):(?!=)", line)
        if m and not (i and out[i - 1].startswith("# Not a target")):
            targets.update(m.group(1).split())
    return targets


def shown() -> list[tuple[str, int, str, list[str]]]:
    """(doc, line, kind, argv) of every command the docs show."""
    return [(str(path.relative_to(ROOT)), number, kind, argv)
            for path in DOCS for number, text in code_lines(path) for kind, argv in commands(text)]


def test_the_docs_show_commands():
    """The parsing above finds what the docs hold (a change to their format would otherwise pass everything)."""
    found = shown()
    assert sum(kind == "populora" for *_, kind, _ in found) >= 30 and any(kind == "make" for *_, kind, _ in found)
    assert any(doc == "README.md" for doc, *_ in found)


def test_every_command_and_flag_the_docs_show_exists():
    stale = []
    targets = make_targets() if shutil.which("make") else None
    for doc, number, kind, argv in shown():
        if kind == "make":
            goals = [t for t in argv if not t.startswith("-") and not ENV.match(t)]
            missing = [] if targets is None else [g for g in goals if g not in targets]
            stale += [f"{doc}:{number}: `make {' '.join(argv)}`: the Makefile has no target {g}" for g in missing]
            continue
        parser, rest = parser_of(argv)
        found = problems(parser, rest) + settings(argv)
        stale += [f"{doc}:{number}: `populora {' '.join(argv)}`: {p}" for p in found]
    assert not stale, "stale commands in the docs:\n" + "\n".join(stale)


@pytest.mark.parametrize("argv, expected", [
    (["train", "--config", "c.yaml", "--set", "steps=2"], []),
    (["trian", "--config", "c.yaml"], ["has no command trian"]),
    (["runs", "RUN_ID", "--ancestry", "S2", "--jsn"], ["`populora runs` has no flag --jsn"]),
    (["report", "--run", "R", "--json"], []),
    (["report", "--run", "R", "--nope"], ["`populora report` has no flag --nope"]),
    (["bench", "lora|nope", "--json"], ["has no choice for which nope"]),
    (["bench", "eval", "--json", "--bogus"], ["`populora bench eval` has no flag --bogus"]),
    (["sandbox", "exec", "p.py", "--timeout", "3"], []),
    (["sandbox", "exce", "p.py"], ["`populora sandbox` has no command exce"]),
])
def test_a_wrong_command_or_flag_is_found_and_a_right_one_passes(argv, expected):
    """The check itself, on commands known right and wrong (each kind of parser: the top one, a layer's own, a
    dispatched bench, the sandbox's sub-commands)."""
    parser, rest = parser_of(argv)
    found = problems(parser, rest)
    assert len(found) == len(expected) and all(e in f for e, f in zip(expected, found)), found


def test_a_setting_that_is_no_field_and_a_preset_that_is_no_file_are_found():
    assert settings(["train", "--config", "configs/smoke.yaml", "--set", "steps=2", "--set", "KEY=VALUE"]) == []
    assert settings(["sweep", "--grid", "population.teachers,population.students=1:1,4:4"]) == []
    wrong = settings(["train", "--config", "configs/nope.yaml", "--set", "optim.lrr=1", "--set", "steps=2"])
    assert len(wrong) == 2 and "no configs/nope.yaml" in wrong[0] and "'lrr' is not a field of optim" in wrong[1]
    assert "not a field" in settings(["eval", "--set", "generation.top_q=1"])[0]


def test_a_doc_line_is_read_as_the_shell_would():
    text = ("CI=true .venv/bin/populora report --run RUN_ID [--step N] | --results r.json | --sweep S [--json] "
            "| tee out.txt && make test TEST_WORKERS=0")
    assert list(commands(text)) == [
        ("populora", ["report", "--run", "RUN_ID", "--step", "N", "--results", "r.json", "--sweep", "S", "--json"]),
        ("make", ["test", "TEST_WORKERS=0"])]
    assert list(commands("python -m populora runs --json")) == [("populora", ["runs", "--json"])]
    assert list(commands("populora/ui  (Streamlit: Launch, Runs)")) == []
