"""lm-eval hooks for PopuLoRA's math tasks: prompt, gold answer and math-verify grading per benchmark.

Referenced from the task YAMLs next to this file (``!function utils.<name>``), so the same prompts run from
``populora eval`` and from ``lm_eval --include_path <dir written by populora eval --export-tasks>``. Two variants
per benchmark: ``<hook>_<benchmark>`` (protocol quick: a chat turn asking for \\boxed{}) and
``<hook>_azr_<benchmark>`` (protocol azr: the bare question, put in AZR's template by the model side, the answer
read as AZR reads it). Besides ``exact_match``, each document reports ``grading_fallback``: 1 when its verdict
was not math-verify's (exact text match, timeout, error), so no fallback goes unseen.

Sampled evaluation (``populora eval --n-samples N --temperature T``, exported with ``repeats: N`` and the
``take_first_k`` filter) hands ``process_results`` the document's N responses: ``exact_match`` is then the mean of
their verdicts (pass@1 averaged within the problem), and ``sample_verdicts`` lists each one's (correct, fallback).
"""

from populora.evaluation.harness.math_grading import gold_answer, grade_verdict, question

PROMPT = "{question}\n\nSolve the problem step by step, then give the final answer as \\boxed{{ANSWER}}."


def _make(benchmark, protocol):
    def doc_to_text(doc):
        q = question(benchmark, doc).strip()
        return q if protocol == "azr" else PROMPT.format(question=q)

    def doc_to_target(doc):
        return gold_answer(benchmark, doc)

    def process_results(doc, results):
        if isinstance(results[0], str):  # greedy: one response
            verdict = grade_verdict(results[0], gold_answer(benchmark, doc), protocol)
            return {"exact_match": float(verdict.correct), "grading_fallback": float(verdict.fallback)}
        verdicts = [grade_verdict(r, gold_answer(benchmark, doc), protocol) for r in results[0]]
        return {"exact_match": sum(v.correct for v in verdicts) / len(verdicts),
                "grading_fallback": sum(v.fallback for v in verdicts) / len(verdicts),
                "sample_verdicts": [[bool(v.correct), bool(v.fallback)] for v in verdicts]}

    return doc_to_text, doc_to_target, process_results


for _b in ("aime24", "aime25", "amc23", "math500", "minerva_math", "gsm8k", "olympiadbench"):
    for _p, _infix in (("quick", ""), ("azr", "azr_")):
        (globals()[f"doc_to_text_{_infix}{_b}"], globals()[f"doc_to_target_{_infix}{_b}"],
         globals()[f"process_results_{_infix}{_b}"]) = _make(_b, _p)


def count(items):
    """The aggregation of ``sample_verdicts``: how many documents were graded (the verdicts are read per sample)."""
    return len(items)
