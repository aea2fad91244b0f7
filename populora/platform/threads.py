"""How torch's CPU threads wait for work, set for every PopuLoRA process before torch loads.

torch's CPU wheels run their intra-op pool on GNU OpenMP, whose idle threads spin on a core for a while before
they sleep. On a quiet machine that saves a wake-up per op. On a shared one (two runs at once, the UI, the
sandbox workers, a test suite) a spinning thread waits on a core another process holds, and small ops, the
kind a 135M model's decoding is made of, wait for the scheduler: measured here, 3,000 small matmuls took
42-55 s under the default policy and 1.2-2.4 s with ``OMP_WAIT_POLICY=PASSIVE`` on a 2-core machine at load
7-10 (``populora bench threads`` measures it side by side). Running several trainings at once is what the
platform is for, so PopuLoRA makes idle threads sleep unless the user chose a policy. It must be set before
torch is first imported (libgomp reads it once), so ``populora/__init__.py`` calls :func:`configure`.
"""

from __future__ import annotations

import os

ENV = "OMP_WAIT_POLICY"
DEFAULT = "PASSIVE"

# A decoding step's shape on the embedded model: 8 rows against a 576 x 1536 MLP weight, many times over.
_WORK = """
import time, torch
torch.manual_seed(0)
x, w = torch.randn(8, 576), torch.randn(576, 1536)
for _ in range(200): (x @ w).relu()
t = time.perf_counter()
for _ in range({n}): (x @ w).relu()
print(time.perf_counter() - t)
"""


def configure() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless the environment already names a policy."""
    os.environ.setdefault(ENV, DEFAULT)


def _time_policy(policy: str | None, n: int) -> float:
    import subprocess  # here, not at the top: every sandbox worker imports this package and should stay small
    import sys

    env = {k: v for k, v in os.environ.items() if k != ENV}
    if policy:
        env[ENV] = policy
    out = subprocess.run([sys.executable, "-c", _WORK.format(n=n)], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def bench_wait_policy(n: int = 3000, repeats: int = 3) -> dict:
    """Seconds for ``n`` small matmuls under libgomp's default wait policy and under PASSIVE, alternated in
    fresh processes (best of ``repeats`` each), and ``ratio`` = passive / default: below 1 PASSIVE is faster.
    The machine's load average is printed with them: the gap is small when the machine is quiet."""
    default, passive = [], []
    for _ in range(repeats):
        default.append(_time_policy(None, n))
        passive.append(_time_policy(DEFAULT, n))
    return {"default_s": min(default), "passive_s": min(passive), "ratio": min(passive) / min(default),
            "load_1min": os.getloadavg()[0]}
