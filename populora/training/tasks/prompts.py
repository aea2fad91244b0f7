"""Prompt pieces shared by the task kinds: chat messages with few-shot turns and an assistant prefill.

The prefill (e.g. "```output\\n") is part of the prompt, not of the sampled completion: it pins the format
for small models, and the policy gradient only sees the tokens the adapter chose.
"""

from __future__ import annotations

SYSTEM = "You are a careful Python programmer. Answer in the exact format asked, with fenced blocks."


def fenced(label: str, body: str) -> str:
    return f"```{label}\n{body.strip()}\n```"


def chat(shots: list[tuple[str, str]], question: str) -> list[dict]:
    """System message, then (user, assistant) few-shot pairs, then the question."""
    messages = [{"role": "system", "content": SYSTEM}]
    for user, assistant in shots:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": question})
    return messages
