"""The planted environment learns with the real vLLM CPU engine as its generator (``model.generation=vllm``): the
loop of tests/training/test_learns.py with every proposal and answer sampled by vLLM from the adapters the trainer
(batched multi-LoRA) has just updated, the planted base (training/tasks/planted_base.py) loaded by vLLM.

What matters most here is the generator's refresh: after each update the engine must serve the new adapter (fresh
LoRA ids, ``VllmBackend._sync``). With ``POPULORA_PLANTED_BUG=stale_generator`` the engine loads each adapter once
and serves it as it was before any update, and this test must fail:

    POPULORA_PLANTED_BUG=stale_generator .venv-vllm/bin/python -m pytest -q -p no:cacheprovider -s \\
        tests/vllm_real/test_learns_vllm.py

One engine per seed (the trainer builds its own, as a run does: its start is ~15 s of the test). docs/learning.md
has the figures, with and without the bug.

In `make test-paper`, not `make test` (~100-150 s of CPU): make test holds the engine to the trainer instead
(tests/vllm_real/test_engine.py: its greedy tokens and sampled log-probs are the trainer's, and an updated adapter
reaches it under a fresh id, red with ``stale_generator`` planted), and the trainer's loop learns there
(tests/training/test_learns.py, multi-LoRA).
"""

import os

import planted_bugs  # tests/subprocess_site (on the path: tests/conftest.py)
import pytest

from populora.training import learn_check as learning

pytestmark = [pytest.mark.slow, pytest.mark.paper]
SEEDS, STEPS, WINDOW = [0, 1, 2], 12, 4
MARGIN = 0.15  # student reward +1 right / -0.5 wrong (chance: +0.25)
# a rise within 12 steps (a higher lr than the preset's), no KL forwards (logged only): as the PEFT test's
SETTINGS = ["optim.lr=0.008", "optim.kl_every=1000"]


@pytest.fixture
def planted_bug(monkeypatch):
    """The bug ``POPULORA_PLANTED_BUG`` names, planted in this process (the engine runs inline, here)."""
    name = os.environ.get(planted_bugs.ENV)
    if name:
        planted_bugs.plant(name, monkeypatch.setattr)
    return name


def test_planted_environment_learns_with_vllm_generating(planted_bug):
    curve = learning.run_planted(SEEDS, STEPS, [*learning.BACKENDS["vllm"], *SETTINGS])
    for role in learning.ROLES:
        s = learning.rise(curve.rewards[role], WINDOW)
        print(f"{role} (bug {planted_bug}): start {s['start']:+.3f} end {s['end']:+.3f} rise {s['rise']:+.3f} "
              f"interval {s['interval']} one-sided lower {s['lower']}")
    s = learning.rise(curve.rewards["student"], WINDOW)
    assert learning.learned(s, MARGIN), (
        f"student reward did not rise by {MARGIN} with a one-sided 95% bound above 0 over seeds {SEEDS}: {s}")
