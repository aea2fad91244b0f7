"""Math answers: the gold answer of each benchmark's records, the model's final answer, and grading with math-verify.

A model output with no recognisable answer scores 0; grading never raises.
"""

from __future__ import annotations

import ast
import re

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


def predicted_answer(output: str) -> str | None:
    """The model's final answer: the last \\boxed{}, else the number after 'answer is', else the last number."""
    boxed = last_boxed(output)
    if boxed is not None:
        return boxed
    m = re.findall(r"answer is[:\s]*\$?([^\n$]+)", output, re.I)
    if m:
        return m[-1].strip().rstrip(".")
    numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", output)
    return numbers[-1].replace(",", "") if numbers else None


def grade(output: str, gold: str) -> bool:
    """True iff the output's final answer equals the gold one under math-verify (symbolic, numeric, sets)."""
    from math_verify import parse, verify

    answer = predicted_answer(output)
    if answer is None:
        return False
    try:
        gold_parsed = parse(f"${gold}$")
        pred_parsed = parse(f"${answer}$")
        if not gold_parsed or not pred_parsed:
            return answer.strip() == gold.strip()
        return bool(verify(gold_parsed, pred_parsed))
    except Exception:  # math-verify raises on exotic LaTeX; an ungradable answer is wrong, never a crash
        return answer.strip() == gold.strip()
