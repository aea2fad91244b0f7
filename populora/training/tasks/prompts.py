"""Prompt pieces shared by the task kinds, and the two reasoning formats (``tasks.format``).

``azr`` is AZR's layout: the model reasons inside ``<think>...</think>`` and gives its result inside
``<answer>...</answer>``; the prompt ends in the assistant turn opened with ``<think>`` (AZR ends its prompt
in ``Assistant: <think>``), and the result is read from the answer block only. A missing or malformed layout is
a format error, as in AZR's format check.

``direct`` is a reduction for tiny CPU models, not the paper's method: no reasoning at all, few-shot turns and
an assistant prefill up to a code fence (e.g. "```output\\n"), generation stopping at the next fence. The prefill
is part of the prompt, not of the sampled completion, so the policy gradient only sees the tokens the adapter
chose.
"""

from __future__ import annotations

import re

FORMATS = ("azr", "direct")
REDUCTION_NOTE = "a reduction of AZR's method: answer-only prefilled prompts, no reasoning trained"

DIRECT_SYSTEM = "You are a careful Python programmer. Answer in the exact format asked, with fenced blocks."
AZR_SYSTEM = (
    "You are a careful Python programmer talking with a user. You think before you answer: first reason step by "
    "step inside <think> </think>, then give your final result inside <answer> </answer>, laid out exactly as the "
    "user asks, i.e. <think> reasoning here </think> <answer> result here </answer>."
)
THINK = "<think>"
_AZR_LAYOUT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def fenced(label: str, body: str) -> str:
    return f"```{label}\n{body.strip()}\n```"


def chat(shots: list[tuple[str, str]], question: str) -> list[dict]:
    """The direct format: system message, then (user, assistant) few-shot pairs, then the question."""
    messages = [{"role": "system", "content": DIRECT_SYSTEM}]
    for user, assistant in shots:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": question})
    return messages


def azr_prompt(question: str) -> tuple[list[dict], str]:
    """The azr format: the layout instruction, the question, and the assistant turn opened with ``<think>``."""
    return [{"role": "system", "content": AZR_SYSTEM}, {"role": "user", "content": question}], THINK


def answer_block(completion: str) -> str | None:
    """The result inside the last ``<answer>`` block of a completion sampled after the ``<think>`` prefill, or
    None when the text is not ``<think>...</think> <answer>...</answer>`` (AZR's format check, prefill included).

    >>> answer_block("f doubles 2.</think>\\n<answer>```output\\n4\\n```</answer>")
    '```output\\n4\\n```'
    >>> answer_block("4") is None, answer_block("</think> <answer>4") is None
    (True, True)
    """
    full = THINK + completion
    if not _AZR_LAYOUT.match(full):
        return None
    return _ANSWER.findall(full)[-1].strip()


def unwrap(completion: str, fmt: str, prefill: str) -> str | None:
    """The text a kind parses: azr, the answer block (None = format error); direct, prefill + completion."""
    return answer_block(completion) if fmt == "azr" else prefill + completion


def stop(fmt: str, role: str) -> tuple[str, ...]:
    """Stop strings: azr ends at ``</answer>`` (kept in the completion); direct students stop at the closing fence."""
    if fmt == "azr":
        return ("</answer>",)
    return ("```",) if role == "student" else ()


LAYOUT = "First reason inside <think> </think>; then write your result inside <answer> </answer>."


def rules(kind_sentence: str) -> str:
    """What every proposed program must obey (what the sandbox checks), in one place for the three kinds."""
    return (
        "### Rules for the program\n"
        "- Name the entry function `f`; it takes at least one argument and returns a value. Helpers may be nested "
        "inside f.\n"
        "- Deterministic: the same input always gives the same result. No randomness, time, I/O, printing, "
        "logging or global state; no `input(`, `eval`, `exec`, `open` or `id`.\n"
        "- Imports only of pure standard-library modules (math, itertools, collections, functools, re, ...); "
        "never os, sys, random, time, datetime, threading, subprocess, logging, hashlib or calendar.\n"
        "- Finishes within a few seconds.\n"
        f"- {kind_sentence}\n"
    )
