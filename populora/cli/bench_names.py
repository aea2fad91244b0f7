"""The names of ``populora bench NAME``: one list for the top parser's help (``populora.cli``, no torch) and the
bench parser's choices (``cli/bench.py``)."""

BENCHES = ("lora", "step", "evolve", "verifier", "eval", "threads", "scale", "vllm", "stats", "learn")
