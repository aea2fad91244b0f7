"""Every PopuLoRA process makes torch's idle OpenMP threads sleep (a shared machine's cores are not theirs to
spin on) unless the user chose a policy; `populora bench threads` measures the two policies side by side."""

from __future__ import annotations

import os
import subprocess
import sys

from populora.platform import threads

SHOW = "import populora, os; print(os.environ.get('OMP_WAIT_POLICY'))"


def _policy_seen(env_policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != threads.ENV}
    if env_policy:
        env[threads.ENV] = env_policy
    return subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_importing_populora_sets_a_passive_wait_policy_unless_the_user_chose_one():
    assert _policy_seen(None) == "PASSIVE"
    assert _policy_seen("ACTIVE") == "ACTIVE"


def test_bench_threads_times_both_policies_in_fresh_processes():
    out = threads.bench_wait_policy(n=200, repeats=1)
    assert out["default_s"] > 0 and out["passive_s"] > 0
    assert out["ratio"] == out["passive_s"] / out["default_s"]
