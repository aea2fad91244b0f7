"""Why tasks were invalid, grouped: the verifier's reasons carry details (a number, a variable name, an input)
that make every reason unique, so the Tasks page counts them by kind of failure (pure functions)."""

from __future__ import annotations

import re

import pandas as pd

_EXCEPTION = re.compile(r"^(\w+): (?:\1: )?(\w+(?:Error|Exception|Exit|Interrupt|Warning))\b")  # "error: error: X" too
_INPUT = re.compile(r"^input .* does not run \((\w+)")


_REPEATED = re.compile(r"^(\w+): \1: ")


def reason_text(reason) -> str:
    """A verifier's reason as shown: the status said once (runs logged before ``Verdict.said`` repeat it).

    >>> reason_text("error: error: TypeError: bad operand"), reason_text("wrong: f(1) = 2"), reason_text(None)
    ('error: TypeError: bad operand', 'wrong: f(1) = 2', '(no reason logged)')
    """
    text = str(reason or "").strip()
    return _REPEATED.sub(r"\1: ", text) if text and text != "nan" else "(no reason logged)"


def reason_kind(reason) -> str:
    """The kind of a verifier's reason: the exception type, not its message; numbers as N.

    >>> reason_kind("error: NameError: name 'y' is not defined")
    'error: NameError'
    >>> reason_kind("error: error: UnboundLocalError: cannot access local variable 'a'")
    'error: UnboundLocalError'
    >>> reason_kind("format: 1 distinct valid inputs, need 3")
    'format: N distinct valid inputs, need N'
    >>> reason_kind("input [1, 2] does not run (timeout: took longer than 2s)")
    'input does not run (timeout)'
    >>> reason_kind(""), reason_kind(None)
    ('(no reason logged)', '(no reason logged)')
    """
    text = str(reason or "").strip()
    if not text or text == "nan":
        return "(no reason logged)"
    for pattern, fmt in ((_EXCEPTION, "{0}: {1}"), (_INPUT, "input does not run ({0})")):
        found = pattern.match(text)
        if found:
            return fmt.format(*found.groups())
    text = re.sub(r"\d+", "N", text)
    return text if len(text) <= 70 else text[:69] + "…"


def reason_counts(tasks: pd.DataFrame) -> pd.DataFrame:
    """Invalid tasks per reason kind (and task kind), most frequent first: columns reason, kind, tasks, share.

    >>> t = pd.DataFrame({"valid": [False, False, True], "kind": ["code_f"] * 3,
    ...                   "reason": ["error: NameError: x", "error: NameError: y", "ok"]})
    >>> reason_counts(t).to_dict("records")
    [{'reason': 'error: NameError', 'kind': 'code_f', 'tasks': 2, 'share': 1.0}]
    """
    invalid = tasks[~tasks["valid"].astype(bool)]
    if invalid.empty:
        return pd.DataFrame(columns=["reason", "kind", "tasks", "share"])
    counts = (invalid.assign(reason=invalid["reason"].map(reason_kind)).groupby(["reason", "kind"]).size()
              .rename("tasks").reset_index().sort_values(["tasks", "reason"], ascending=[False, True], ignore_index=True))
    return counts.assign(share=counts["tasks"] / len(invalid))


def task_title(task) -> str:
    """A task's heading: an invalid task says its own reason, as the table beside it does (the reason's kind, with
    numbers as N, is for grouping only: the walk found "N distinct valid inputs, need N" over a row "1 ... need 4").

    >>> task_title({"valid": False, "step": 2, "kind": "code_i", "teacher": "T0", "task_id": "t9",
    ...             "reason": "format: 1 distinct valid inputs, need 4", "reason_kind": "format: N distinct valid inputs, need N"})
    '❌ step 2 · code_i · by T0 · invalid: format: 1 distinct valid inputs, need 4 · t9'
    """
    rate = task.get("solve_rate")
    rate_text = "unrated" if rate is None or pd.isna(rate) else f"solve {100 * float(rate):.0f}%"
    if not task.get("valid"):
        reason = reason_text(task.get("reason"))
        rate_text = f"invalid: {reason if len(reason) <= 80 else reason[:79] + '…'}"
    return f"{'✅' if task.get('valid') else '❌'} step {task.get('step')} · {task.get('kind')} · by {task.get('teacher')} · {rate_text} · {task.get('task_id')}"
