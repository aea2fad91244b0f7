"""Prompt pieces shared by the task kinds, and the two reasoning formats (``tasks.format``).

``azr`` is AZR's layout: the model reasons inside ``<think>...</think>`` and gives its result inside
``<answer>...</answer>``; the prompt ends in the assistant turn opened with ``<think>`` (AZR ends its prompt
in ``Assistant: <think>``), and the result is read from the answer block only. A missing or malformed layout is
a format error, as in AZR's format check.

``direct`` is a reduction for tiny CPU models, not the paper's method: no reasoning at all, few-shot turns and
an assistant prefill up to a code fence (e.g. "```output\\n"), generation stopping at the next fence. The prefill
is part of the prompt, not of the sampled completion, so the policy gradient only sees the tokens the adapter
chose.

Two templates (``tasks.template``) turn a kind's prompt into text: ``azr``, AZR's own for base models (R1-style
plain text, no chat markup, no system prompt; :func:`frame`), and ``chat``, the model's chat template with the
layout in a system turn (instruct models, and the embedded demo model with the direct format).

No prompt tells a teacher how it is rewarded: AZR's proposer never sees its reward rule.
"""

from __future__ import annotations

import re

FORMATS = ("azr", "direct")
TEMPLATES = ("azr", "chat")
REDUCTION_NOTE = "a reduction of AZR's method: answer-only prefilled prompts, no reasoning trained"

DIRECT_SYSTEM = "You are a careful Python programmer. Answer in the exact format asked, with fenced blocks."
# tasks.template: chat (an instruct model's own chat template): the azr layout asked for in a system turn
AZR_SYSTEM = (
    "You are a careful Python programmer talking with a user. You think before you answer: first reason step by "
    "step inside <think> </think>, then give your final result inside <answer> </answer>, laid out exactly as the "
    "user asks, i.e. <think> reasoning here </think> <answer> result here </answer>."
)
# tasks.template: azr (base models): AZR's R1-style plain text (``instruction_following`` in its process_data.py,
# our words, the same facts): who talks, that the assistant reasons first, the two tags and their layout; then
# ``User: <question>`` and ``Assistant: <think>``. No chat markup and no system turn: AZR replaces the tokenizer's
# chat template with plain concatenation of the messages (``pretrained_tokenizer=True``).
R1_PREAMBLE = (
    "This is a dialogue between a User and an Assistant. The User brings a problem and the Assistant solves it: "
    "it first thinks the problem through, then gives the User its answer. The thinking goes inside <think> </think> "
    "tags and the answer inside <answer> </answer> tags, laid out as <think> thinking here </think> "
    "<answer> answer here </answer>."
)
THINK = "<think>"
_AZR_LAYOUT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.S)


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
    """The azr format: the question, and the assistant turn opened with ``<think>``; the layout instruction
    is the template's (:func:`frame`)."""
    return [{"role": "user", "content": question}], THINK


def frame(prompt: tuple[list[dict], str], fmt: str, template: str) -> tuple[list[dict], str]:
    """A kind's prompt in the run's ``tasks.template``: azr, one plain message holding AZR's R1 text around the
    question (the direct format's few-shot turns need roles, so the config refuses azr + direct); chat, the azr
    format's layout as a system turn (the direct format brings its own)."""
    messages, prefill = prompt
    if template == "azr":
        if fmt != "azr" or len(messages) != 1:
            raise ValueError("tasks.template 'azr' needs tasks.format 'azr' (one question, no few-shot turns); "
                             "set tasks.template: chat")
        return [{"role": "user", "content": f"{R1_PREAMBLE} User: {messages[0]['content']}\nAssistant: "}], prefill
    if fmt == "azr":
        return [{"role": "system", "content": AZR_SYSTEM}, *messages], prefill
    return messages, prefill


def render(backend, prompt: tuple[list[dict], str], fmt: str, template: str) -> str:
    """The prompt text a backend generates from: azr, AZR's plain concatenation (contents joined by newlines, no
    chat markup) + prefill; chat, the model's chat template + prefill."""
    messages, prefill = frame(prompt, fmt, template)
    if template == "azr":
        return "\n".join(m["content"] for m in messages) + prefill
    return backend.encode_chat(messages, prefill)


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
    return answer_content(full)


def format_failure(kind: str, completion: str, fmt: str) -> str:
    """Why a student's completion has no answer (a format error): the layout, or, the layout being fine, the
    answer itself.

    >>> format_failure("code_o", "no tags", "azr"), format_failure("code_f", "x</think><answer>f</answer>", "azr")
    ('format: no <think>...</think> <answer>...</answer> layout', 'format: the answer has no fenced code block')
    """
    if fmt == "direct":
        return "format: no parseable answer"
    if answer_block(completion) is None:
        return "format: no <think>...</think> <answer>...</answer> layout"
    return f"format: the answer has no {'fenced code block' if kind == 'code_f' else 'parseable value'}"


def answer_content(completion: str) -> str:
    """What AZR reads as the answer (custom_evaluate.py:86-98): the text after the **last** ``<answer>`` up to the
    next ``</answer>``, stripped; '' without one. No layout check (AZR's solve-rate estimate reads answers so).

    >>> answer_content("I put it in <answer> at the end.</think> <answer> 4 </answer>"), answer_content("4")
    ('4', '')
    """
    if "<answer>" not in completion:
        return ""
    return completion.split("<answer>")[-1].split("</answer>")[0].strip()


def unwrap(completion: str, fmt: str, prefill: str) -> str | None:
    """The text a kind parses: azr, the answer block (None = format error); direct, prefill + completion."""
    return answer_block(completion) if fmt == "azr" else prefill + completion


def stop(fmt: str, role: str, at_answer: bool = True) -> tuple[str, ...]:
    """Stop strings: azr ends at ``</answer>`` (kept in the completion) unless ``at_answer`` is off (AZR samples
    to EOS; ``tasks.stop_at_answer``); direct students stop at the closing fence."""
    if fmt == "azr":
        return ("</answer>",) if at_answer else ()
    return ("```",) if role == "student" else ()


LAYOUT = "First reason inside <think> </think>; then write your result inside <answer> </answer>."


def program_requirements(seconds: float) -> str:
    """What AZR asks of every program (its proposer's and its code_f solver's "Code Requirements"), in our words."""
    return (
        "- The entry function is named `f` (`def f(...): ...`); definitions nested inside `f` are fine.\n"
        "- `f` returns a value and takes at least one parameter.\n"
        "- `f` is deterministic.\n"
        "- Stay clear of: random numbers or variables, dates and times, I/O of any kind (files, network), "
        "printing or logging, and any state outside the function.\n"
        f"- It must finish within {seconds:g} seconds on an ordinary CPU.\n"
        "- Put every import and class definition at the very top of the code.\n"
        "- The code ends with the `return` of the main function `f`; anything after it is cut off.\n"
    )


def banned_text(banned: tuple[str, ...]) -> str:
    """AZR shows its proposer the banned-keyword list, to be avoided in any form, even in comments."""
    return ", ".join(dict.fromkeys(banned))
