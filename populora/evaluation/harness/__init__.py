"""The benchmark harnesses: the ten benchmarks' files, prompts and graders (EvalPlus, lm-eval, LiveCodeBench, math-
verify), the generation settings and the resumable runner that scores targets on them.
"""
