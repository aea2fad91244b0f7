"""lm-eval hooks for PopuLoRA's math tasks: prompt, gold answer and math-verify grading per benchmark.

Referenced from the task YAMLs next to this file (``!function utils.<name>``), so the same prompts run from
``populora eval`` and from ``lm_eval --include_path <dir written by populora eval --export-tasks>``.
"""

from populora.evaluation.math_grading import gold_answer, grade, question

PROMPT = "{question}\n\nSolve the problem step by step, then give the final answer as \\boxed{{ANSWER}}."


def _make(benchmark):
    def doc_to_text(doc):
        return PROMPT.format(question=question(benchmark, doc).strip())

    def doc_to_target(doc):
        return gold_answer(benchmark, doc)

    def process_results(doc, results):
        return {"exact_match": float(grade(results[0], gold_answer(benchmark, doc)))}

    return doc_to_text, doc_to_target, process_results


for _b in ("aime24", "aime25", "amc23", "math500", "minerva_math", "gsm8k", "olympiadbench"):
    globals()[f"doc_to_text_{_b}"], globals()[f"doc_to_target_{_b}"], globals()[f"process_results_{_b}"] = _make(_b)
