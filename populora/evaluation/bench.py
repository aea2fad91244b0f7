"""``populora bench eval``: how fast evaluation runs here, generation and scoring measured separately.

Generation: greedy completions of HumanEval+ and GSM8K prompts through the model backend with an adapter applied
(the evaluation path). Scoring: EvalPlus on canonical solutions (base + plus tests), LiveCodeBench programs in
the sandbox, math-verify on reference answers. ``--json`` prints one JSON object as the last line.

``--targets N``: population evaluation instead, side by side on the same problems: N targets (N - 1 adapters and
the bare base model) one at a time, then all at once in mixed-adapter batches (``evaluation/harness/batching.py``, what
``populora eval`` does); ``ratio`` = batched / sequential generation time, and the completions must be identical.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from populora.evaluation.harness import benchmarks, evalplus_suite, livecodebench, math_grading
from populora.evaluation.harness.batching import SharedBackend
from populora.evaluation.harness.generation import GenConfig, chat_prompt, complete, ensure_offline
from populora.platform.backends import BackendConfig, make_backend


def _rate(n: int, fn) -> float:
    t0 = time.perf_counter()
    fn()
    return n / max(time.perf_counter() - t0, 1e-9)


def generation(root, n: int, max_new_tokens: int, tiny: bool, batch_size: int, kind: str = "multilora") -> dict:
    backend = make_backend(BackendConfig(tiny_random=tiny, device="cpu", kind=kind, slots=1))
    backend.add_adapter("bench", seed=0)  # an adapter applied, as in evaluation (B = 0: same outputs as the base)
    gen = GenConfig(max_new_tokens=max_new_tokens, batch_size=batch_size)
    probs = list(evalplus_suite.problems("humaneval_plus", root, n).values())
    code = [evalplus_suite.prompt(backend, p) for p in probs]
    maths = [chat_prompt(backend, r["question"]) for r in benchmarks.read_records(root, "gsm8k", n)]
    complete(backend, "bench", code[:1], GenConfig(max_new_tokens=4))  # warm-up
    return {"gen_code_samples_per_s": _rate(len(code), lambda: complete(backend, "bench", code, gen)),
            "gen_math_samples_per_s": _rate(len(maths), lambda: complete(backend, "bench", maths, gen)),
            "gen_max_new_tokens": max_new_tokens, "gen_batch_size": batch_size}


def _timed_threads(threads: list) -> float:
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t0


def population(root, targets: int, n: int, max_new_tokens: int, tiny: bool, batch_size: int,
               kind: str = "multilora") -> dict:
    """Generation time of ``targets`` targets on the same ``n`` HumanEval+ prompts: one target after the other,
    then every target at once through :class:`SharedBackend`, as ``populora eval`` runs them. Scoring is left
    out: it is the same work either way."""
    backend = make_backend(BackendConfig(tiny_random=tiny, device="cpu", kind=kind, slots=max(targets - 1, 1)))
    adapters: list[str | None] = [None]  # the bare base model is a target too: rows without adapter
    for i in range(targets - 1):
        backend.add_adapter(f"t{i}", seed=i)
        adapters.append(f"t{i}")
    gen = GenConfig(max_new_tokens=max_new_tokens, batch_size=batch_size)
    code = [evalplus_suite.prompt(backend, p) for p in evalplus_suite.problems("humaneval_plus", root, n).values()]
    sequential, batched = [None] * len(adapters), [None] * len(adapters)
    shared = SharedBackend(backend, len(adapters))

    def one_at_a_time() -> None:
        complete(backend, adapters[-1], code[:1], GenConfig(max_new_tokens=4))  # warm-up
        for i, a in enumerate(adapters):
            sequential[i] = complete(backend, a, code, gen)

    def party(i: int) -> None:
        try:
            batched[i] = complete(shared.party(i), adapters[i], code, gen)
        finally:
            shared.leave()

    # both from threads other than the main one: torch's intra-op thread pool behaves differently in the main
    # thread (on a loaded machine its spinning threads can cost 10x), and the comparison is of batching only
    sequential_s = _timed_threads([threading.Thread(target=one_at_a_time)])
    batched_s = _timed_threads([threading.Thread(target=party, args=(i,)) for i in range(len(adapters))])
    if batched != sequential:
        raise RuntimeError("batched population generation differs from one target at a time")
    return {"targets": targets, "problems": len(code), "sequential_s": sequential_s, "batched_s": batched_s,
            "ratio": batched_s / sequential_s, "merged_generate_calls": shared.calls, "identical": True,
            "gen_max_new_tokens": max_new_tokens, "gen_batch_size": batch_size, "backend": kind}


def scoring(root, n: int) -> dict:
    out = {}
    for name in evalplus_suite.DATASETS:
        probs = evalplus_suite.problems(name, root, n)
        samples = [{"task_id": t, "solution": p["prompt"] + p["canonical_solution"]} for t, p in probs.items()]
        evalplus_suite.expected_outputs(name, probs, root)  # ground truth is cached once per dataset; not timed
        out[f"score_{name}_samples_per_s"] = _rate(len(samples), lambda: evalplus_suite.score_samples(name, probs, samples, root))
    records = livecodebench.problems(root, n)
    junk = [["print(input())\n```"] for _ in records]  # runs every public test until the first mismatch
    out["score_livecodebench_samples_per_s"] = _rate(len(records), lambda: livecodebench.score(records, junk))
    golds = [math_grading.gold_answer("math500", r) for r in benchmarks.read_records(root, "math500", n)]
    out["score_math_samples_per_s"] = _rate(len(golds), lambda: [math_grading.grade(f"\\boxed{{{g}}}", g) for g in golds])
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="populora bench eval", description="samples/s of evaluation generation and scoring on this machine")
    p.add_argument("--n", type=int, default=16, help="samples per measurement")
    p.add_argument("--max-new-tokens", type=int, default=128, help="token budget per generated sample")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--tiny-random", action="store_true", help="tiny random model instead of the embedded one (tests)")
    p.add_argument("--backend", choices=["multilora", "peft"], default="multilora",
                   help="model backend generating (populora eval's default: batched multi-LoRA)")
    p.add_argument("--targets", type=int, default=None,
                   help="population evaluation: N targets one at a time vs all at once (sequential_s, batched_s, ratio)")
    p.add_argument("--data-dir")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object on the last line")
    args = p.parse_args(argv)
    ensure_offline()
    root = benchmarks.data_dir(args.data_dir)
    try:
        benchmarks.verify(root, ["humaneval_plus", "mbpp_plus", "livecodebench", "gsm8k", "math500"])
    except benchmarks.DataError as err:
        print(f"error: {err}")
        return 2
    model = "tiny random model" if args.tiny_random else "embedded SmolLM2-135M-Instruct"
    if args.targets:
        figures = population(root, args.targets, args.n, args.max_new_tokens, args.tiny_random, args.batch_size,
                             args.backend)
        print(f"population evaluation on CPU ({model}, {args.targets} targets x {args.n} HumanEval+ problems):")
    else:
        figures = generation(root, args.n, args.max_new_tokens, args.tiny_random, args.batch_size, args.backend)
        figures.update(scoring(root, args.n))
        print(f"evaluation speed on CPU ({model}, {args.n} samples each):")
    for k, v in figures.items():
        print(f"  {k:40} {v:10.2f}" if isinstance(v, float) else f"  {k:40} {v!s:>10}")
    if args.json:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0
