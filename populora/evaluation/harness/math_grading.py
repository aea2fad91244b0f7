"""Math answers: the gold answer of each benchmark's records, the model's final answer, and grading with math-verify.

A model output with no recognisable answer scores 0; grading never raises. Grading runs math-verify in a bounded
process pool (``grading_pool``), so a verdict is the same in every thread and every mode; how each verdict was
reached is kept (``Verdict.how``), and the fallbacks (exact text match, timeout, error) are counted, never silent.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple

from populora.evaluation.harness import grading_pool

GOLD_FIELDS = {"aime24": "answer", "aime25": "answer", "amc23": "answer", "math500": "answer"}


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (balanced braces).

    >>> last_boxed(r"so \\boxed{\\frac{1}{2}} and \\boxed{3}")
    '3'
    """
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def gold_answer(benchmark: str, record: dict) -> str:
    """The reference answer as text, per benchmark conventions (see the data README)."""
    if benchmark in GOLD_FIELDS:
        return str(record[GOLD_FIELDS[benchmark]]).strip()
    if benchmark == "gsm8k":
        return record["answer"].split("####")[-1].strip().replace(",", "")
    if benchmark == "minerva_math":
        boxed = last_boxed(record["solution"])
        if boxed is None:
            raise ValueError(f"minerva_math record {record.get('idx')} has no \\boxed answer in its solution")
        return boxed
    if benchmark == "olympiadbench":
        answers = record["final_answer"]
        answers = ast.literal_eval(answers) if isinstance(answers, str) and answers.startswith("[") else answers
        return ", ".join(str(a).strip().strip("$") for a in (answers if isinstance(answers, list) else [answers]))
    raise KeyError(f"{benchmark} is not a math benchmark")


def question(benchmark: str, record: dict) -> str:
    return record.get("problem") or record.get("question") or ""


def azr_answer(output: str) -> str | None:
    """AZR's extraction (``extract_azr_answer``, evaluation/math_eval/eval/parser.py, AZR @a82124e): the last
    ``<answer>`` block (its last \\boxed{} if it has one), else the last \\boxed{}, else the first \\[...\\];
    None when none of these is there.

    >>> azr_answer("<think>x</think> <answer>12</answer> <answer>13</answer>")
    '13'
    >>> azr_answer("<answer> 3/4 </answer>")
    '3/4'
    """
    if "<answer>" in output:
        block = output.split("<answer>")[-1].split("</answer>")[0].strip()
        if "boxed" in block:
            boxed = last_boxed(block)
            return boxed.strip() if boxed else None
        return block or None
    boxed = last_boxed(output)
    if boxed is not None:
        return boxed.strip()
    m = re.search(r"\\\[(.*?)\\\]", output, re.S)
    return m.group(1).strip() if m else None


def predicted_answer(output: str, protocol: str = "quick") -> str | None:
    """The model's final answer. ``azr``: AZR's extraction (:func:`azr_answer`). ``quick``: the last \\boxed{},
    else the text after 'answer is', else the last number."""
    if protocol == "azr":
        return azr_answer(output)
    boxed = last_boxed(output)
    if boxed is not None:
        return boxed
    m = re.findall(r"answer is[:\s]*\$?([^\n$]+)", output, re.I)
    if m:
        return m[-1].strip().rstrip(".")
    numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", output)
    return numbers[-1].replace(",", "") if numbers else None


# How a verdict was reached. Only MATH_VERIFY and NO_ANSWER are the grader working as intended; the others are
# counted per (target, benchmark) as ``grading_fallback`` and shown in the report, never silent.
MATH_VERIFY, NO_ANSWER = "math_verify", "no_answer"
STRING_MATCH = "string_match"   # math-verify read no expression from the gold or the answer: exact text compared
TIMEOUT, ERROR = "timeout", "error"  # over GRADE_TIMEOUT_S, or math-verify raised: wrong
FALLBACKS = (STRING_MATCH, TIMEOUT, ERROR)
GRADE_TIMEOUT_S = 20.0  # math-verify's own defaults: 5 s per parse (two of them) + 5 s for verify, and some slack


class Verdict(NamedTuple):
    correct: bool
    how: str

    @property
    def fallback(self) -> bool:
        return self.how in FALLBACKS


def _verify(answer: str, gold: str) -> tuple[bool, str]:
    """In a grading worker process: math-verify with its signal-based timeouts off (the pool bounds the time)."""
    import math_verify.grader
    import math_verify.parser
    from math_verify import parse, verify

    # its one-time "timeout is disabled" warning is what we asked for: the pool is the timeout
    math_verify.parser.TIMEOUT_WARNING_SHOWN = math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    pred_parsed = parse(f"${answer}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return answer.strip() == gold.strip(), STRING_MATCH
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None)), MATH_VERIFY


def grade_verdict(output: str, gold: str, protocol: str = "quick") -> Verdict:
    """The verdict on ``output`` against ``gold`` and how it was reached; the same in any thread or process."""
    answer = predicted_answer(output, protocol)
    if answer is None:
        return Verdict(False, NO_ANSWER)
    status, value = grading_pool.shared("populora.evaluation.harness.math_grading:_verify", GRADE_TIMEOUT_S).call(answer, gold)
    if status == "ok":
        return Verdict(*value)
    return Verdict(False, TIMEOUT if status == grading_pool.TIMEOUT else ERROR)


def grade(output: str, gold: str, protocol: str = "quick") -> bool:
    """True iff the output's final answer equals the gold one under math-verify (symbolic, numeric, sets)."""
    return grade_verdict(output, gold, protocol).correct
