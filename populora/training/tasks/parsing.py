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
