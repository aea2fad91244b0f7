"""Lenient-but-safe parsing of model text: find fenced blocks, recover code that almost parses.

Small models rarely follow a format exactly, so we accept the first block of the expected kind wherever it
is, an unterminated block, or a bare line. Nothing here executes model text: programs and inputs only reach
the sandbox; answers that must be literals are read by the sandbox's own literal grammar
(``populora.platform.sandbox.values``), so the student side accepts exactly what the verifier can check.
"""

from __future__ import annotations

import ast
import re

from populora.platform.sandbox.values import canonical_literal

MAX_ANSWER_CHARS = 4000

_FENCE = re.compile(r"```[ \t]*([A-Za-z_]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)


def blocks(text: str) -> list[tuple[str, str]]:
    """All fenced blocks as (label, body); an unterminated last block runs to the end.

    >>> blocks("```python\\ndef f(a):\\n    return a\\n```\\n```input\\n3\\n```")
    [('python', 'def f(a):\\n    return a'), ('input', '3')]
    """
    return [(label.lower(), body.strip("\n").rstrip()) for label, body in _FENCE.findall(text)]


def first_block(text: str, *labels: str) -> str | None:
    for label, body in blocks(text):
        if label in labels and body.strip():
            return body
    return None


def parseable_program(code: str, name: str = "f") -> str | None:
    """Return ``code`` (or its longest prefix of whole lines) that parses and defines function ``name``.

    >>> parseable_program("def f(x):\\n    return x + 1\\nHope this helps!")
    'def f(x):\\n    return x + 1'
    >>> parseable_program("x = 1") is None
    True
    """
    lines = code.rstrip().splitlines()
    for end in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:end]).rstrip()
        try:
            tree = ast.parse(candidate)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body):
            return candidate
        return None
    return None


def literal(text: str) -> str | None:
    """The text if it is one value in the verifier's literal grammar (what an output answer must be), else None.
    Canonical text, the form outputs are shown in (``float('nan')``, ``frozenset({1})``...), is always one.

    >>> literal(" [1, 2] ")
    '[1, 2]'
    >>> literal("float('inf')")
    "float('inf')"
    >>> literal("f(3)") is None
    True
    """
    text = text.strip()
    if not text or len(text) > MAX_ANSWER_CHARS:
        return None
    try:
        canonical_literal(text)
    except ValueError:
        return None
    return text


def call_arguments(text: str) -> str | None:
    """The text if it is a valid argument list for ``f(...)`` (what an input must be), else None.

    Accepts ``f(1, 2)`` and strips the call, so a model writing the call instead of the arguments still counts.

    >>> call_arguments("f([1, 2], 3)")
    '[1, 2], 3'
    >>> call_arguments("'abc'")
    "'abc'"
    >>> call_arguments("1, ") is None
    False
    """
    text = text.strip()
    if not text or len(text) > MAX_ANSWER_CHARS:
        return None
    match = re.fullmatch(r"f\((.*)\)", text, re.S)
    if match:
        text = match.group(1).strip()
    if text.startswith(("x =", "x=", "input =", "input=")):
        text = text.split("=", 1)[1].strip()
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(call, ast.Call) or not (call.args or call.keywords):
        return None
    return text


def last_block(text: str, *labels: str) -> str | None:
    """The last non-empty block of one of ``labels`` (AZR reads the last one: a model may restate a draft first)."""
    found = [body for label, body in blocks(text) if label in labels and body.strip()]
    return found[-1] if found else None


def last_line_or_block(text: str, label: str) -> str:
    """Body of the last ``label`` block, else the text up to a closing fence, stripped.

    >>> last_line_or_block("```output\\n1\\n```\\n```output\\n2\\n```", "output")
    '2'
    """
    body = last_block(text, label)
    if body is not None:
        return body.strip()
    return text.split("```", 1)[0].strip()


def first_line_or_block(text: str, label: str) -> str:
    """Body of the first ``label`` block, else the text up to a closing fence, stripped."""
    body = first_block(text, label)
    if body is not None:
        return body.strip()
    return text.split("```", 1)[0].strip()


# ------------------------------------------------------------------------- AZR's reading (tasks.format azr)
# The azr format reads model text as AZR does (absolute_zero_reasoner/rewards/code_reward.py and
# reward_managers.py, paper branch 41ed983): its fence patterns, its fallbacks, and its strictness, so a paper
# preset accepts and refuses what AZR does. The direct format keeps the lenient reading above (small models).
_AZR = re.S | re.I


def azr_blocks(text: str, label: str) -> list[str]:
    """Bodies of every ```label block, stripped (AZR: any whitespace after the label, case-insensitive).

    >>> azr_blocks("```INPUT 'ab'```", "input")
    ["'ab'"]
    """
    return [m.group(1).strip() for m in re.finditer(rf"```{label}\s*\n?(.*?)\n?```", text, _AZR)]


def azr_code_blocks(text: str) -> list[str]:
    """Bodies of every fenced block read as code (AZR's code pattern: an optional ``python`` label, any other
    label stays in the body, so ```` ```python3 ```` gives a first line ``3``).

    >>> azr_code_blocks("```python\\ndef f(a):\\n    return a\\n```")
    ['def f(a):\\n    return a']
    """
    return [m.group(1).strip() for m in re.finditer(r"```(?:python\s*)?\n?(.*?)\n?```", text, _AZR)]


def azr_line(text: str, name: str) -> str | None:
    """AZR's ``# Input:`` / ``# Output:`` / ``# Message:`` fallback: the rest of the text up to a fence."""
    m = re.search(rf"# {name}:\s*(.*?)(?=\n```|$)", text, _AZR)
    return m.group(1) if m else None


def azr_value(content: str, want: str) -> str:
    """A student's input or output inside <answer>, as AZR extracts it (reward_managers.py:76-119): the last
    ```want block, else the last ``# Want:`` line, ``want(...)`` call, ``<want>`` tag or "the want is ...",
    else the whole answer. Never None: what it says is the check's business (a wrong answer, not a format error).

    >>> azr_value("The output is 'ab'.", "output"), azr_value("<input>3</input>", "input"), azr_value("7", "output")
    ("'ab'", '3', '7')
    """
    patterns = [rf"```{want}\s*\n?(.*?)\n?```", rf"# {want}:\s*(.*?)(?=\n```|$)", rf"{want}\s*\((.*?)\)",
                rf"<{want}>\s*(.*?)(?:</{want}>|\s*$)", rf"the {want} is\s*(.*?)\.?$"]
    for pattern in patterns:
        matches = list(re.finditer(pattern, content, _AZR))
        if matches:
            return matches[-1].group(1)
    return content


def azr_message(text: str) -> str | None:
    """A code_f proposal's message: a ```message block, else <message> tags, else a ``# Message:`` line (it may be
    empty); None when there is none."""
    m = (re.search(r"```message\s*\n?(.*?)\n?```", text, _AZR) or re.search(r"<message>\s*(.*?)\s*</message>", text, _AZR))
    if m:
        return m.group(1).strip()
    line = azr_line(text, "Message")
    return None if line is None else line.strip()


def imports_of(program: str) -> list[str]:
    """The import statements anywhere in a program, as lines (AZR's parse_imports, parsers.py:6-33): AZR runs a
    code_f answer with the task program's imports in front of it.

    >>> imports_of("import math\\ndef f(x):\\n    from collections import Counter as C\\n    return x")
    ['import math', 'from collections import Counter as C']
    """
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [line.strip() for line in re.findall(r"^\s*(?:from|import)\s+.*$", program, re.M)]
    lines = []
    for node in ast.walk(tree):
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in getattr(node, "names", []))
        if isinstance(node, ast.Import):
            lines.append(f"import {names}")
        elif isinstance(node, ast.ImportFrom):
            lines.append(f"from {'.' * node.level}{node.module or ''} import {names}")
    return lines
