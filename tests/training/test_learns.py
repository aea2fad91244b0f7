"""The loop learns: the planted environment (training/tasks/planted.py, configs/planted.yaml) through the real
loop (match, propose, validate in the sandbox, solve, rewards, TRR++, the update, generation with the updated
adapters) raises the students' and the teachers' rewards, by a margin, with a one-sided 95% interval over seeds
above 0; and each planted bug turns that red.

A planted bug is one entry of ``BUGS``: a function that monkeypatches one well-named seam. To show a bug turns a
test red, run it with ``POPULORA_PLANTED_BUG=<name>`` (the test then plants that bug, and must fail):

    POPULORA_PLANTED_BUG=update_sign OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -n 0 -m slow \\
        tests/training/test_learns.py

``log_probs_temperature`` is measured by ``test_trainer_log_probs_are_the_samplers``, not by the reward: a
temperature mismatch scales the policy gradient without turning it (whitened advantages), so the reward rises all
the same; what it breaks is the ratio's meaning, which that test checks (the sampler's frequencies against the
trainer's probabilities). docs/learning.md has the figures of each bug's red run.
"""

from __future__ import annotations

import os

import numpy as np
import planted_bugs  # tests/subprocess_site (on the path: tests/conftest.py)
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy import stats as scipy_stats

from populora.platform.backends import BackendConfig, LoraSpec, make_backend
from populora.platform.sandbox.verifier import Validate, Verifier
from populora.training import learn_check as learning
from populora.training.phases import update
from populora.training.tasks import planted, planted_base
from populora.training.tasks.prompts import render
from populora.training.tasks.task import Task

SEEDS, WINDOW, RAY_STEPS = [0, 1, 2], 4, 18
# student reward +1 right / -0.5 wrong (chance: +0.25). At 12 steps, lr 0.008 (below) the runs rose +0.16
# (multi-LoRA), +0.19 (PEFT, vLLM) and +0.37 (Ray, 18 steps), every planted bug at most +0.07 (docs/learning.md):
# 0.10 lies between, and the one-sided bound above 0 is what turns each bug red in any case
MARGIN = {"student": 0.10}
# Each backend's test (and vLLM's, tests/vllm_real/test_learns_vllm.py): 12 steps at lr 0.008, no KL forwards (logged
# only) and one forward per 32 rows (the same gradient): under a minute of CPU each (18 steps at lr 0.005: ~2 minutes)
QUICK_STEPS, QUICK = 12, ["optim.lr=0.008", "optim.kl_every=1000", "optim.micro_batch=32"]
GATED = ("student",)  # the teachers' rise is printed, not yet asserted: at this lr it is ~+0.1, not reliably above 0


# ------------------------------------------------------------------------------ the planted bugs: one seam each
# (tests/subprocess_site/planted_bugs.py: Ray's workers and the CLI plant them at start-up from the same table)

BUGS = planted_bugs.BUGS
WRONG_T = planted_bugs.WRONG_T


@pytest.fixture
def planted_bug(monkeypatch):
    """The bug ``POPULORA_PLANTED_BUG`` names, planted for this test (none by default)."""
    name = os.environ.get("POPULORA_PLANTED_BUG")
    if name:
        planted_bugs.plant(name, monkeypatch.setattr)
    return name


def test_every_bug_seam_exists():
    """Each entry patches something that exists (a renamed seam fails here, not silently in a slow run)."""
    mp = pytest.MonkeyPatch()
    try:
        for name, plant in BUGS.items():
            plant(mp.setattr)  # setattr raises on a missing attribute
    finally:
        mp.undo()


# ------------------------------------------------------------------------------ the statistics


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.data())
def test_rise_is_the_mean_of_end_minus_start(n_seeds, window, data):
    steps = data.draw(st.integers(2 * window, 2 * window + 3))
    values = data.draw(st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.25, 1.0]), min_size=n_seeds * steps,
                                max_size=n_seeds * steps))
    r = np.array(values).reshape(n_seeds, steps)
    out = learning.rise(r, window)
    d = r[:, -window:].mean(1) - r[:, :window].mean(1)
    assert out["rise"] == pytest.approx(d.mean(), abs=1e-12)
    assert out["end"] - out["start"] == pytest.approx(out["rise"], abs=1e-12)
    if n_seeds == 1:
        assert out["interval"] is None and not learning.learned(out, 0.0)
    else:
        lo, hi = out["interval"]
        assert lo <= out["lower"] <= out["rise"] <= hi  # one-sided 95% bound within the two-sided one
        if np.all(d == d[0]):  # ties: a zero-width interval
            assert lo == pytest.approx(hi)


def test_rise_refuses_too_few_steps():
    with pytest.raises(ValueError, match="start and an end"):
        learning.rise(np.zeros((2, 3)), 2)


def test_rise_matches_scipy_t_interval():
    d = np.array([0.3, 0.1, 0.4, 0.2])
    r = np.stack([np.zeros(4), d], 1)  # start 0, end d
    lo, hi = scipy_stats.t.interval(0.95, 3, loc=d.mean(), scale=scipy_stats.sem(d))
    assert learning.rise(r, 1)["interval"] == pytest.approx([lo, hi])


# ------------------------------------------------------------------------------ the planted kind itself


def test_planted_checks_in_the_sandbox_agree_with_the_rule():
    """The sandbox's verdicts on every digit proposal and every answer are the planted rule's."""
    kind, v = planted.Planted(), Verifier()
    tasks = [kind.parse_proposal(d, Task(f"t{d}", planted.KIND, ""), None) for d in planted.DIGITS]
    verdicts = v.check_many([Validate(t.program, t.input) for t in tasks])
    assert [vd.valid for vd in verdicts] == [int(d) % 2 == 1 for d in planted.DIGITS]
    task = tasks[3]
    task.valid, task.output = True, "1"
    answers = [v.check(kind.check_answer(task, a)) for a in planted.DIGITS]
    assert [bool(a.correct) for a in answers] == [planted.right(a) for a in planted.DIGITS]
    assert kind.parse_proposal("x", Task("x", planted.KIND, ""), None).reason.startswith("format")


# ------------------------------------------------------------------------------ it learns (slow: the real loop)


def _assert_learns(curve: learning.Curve, bug: str | None) -> None:
    for role in learning.ROLES:
        s = learning.rise(curve.rewards[role], WINDOW)
        print(f"{role} (bug {bug}): start {s['start']:+.3f} end {s['end']:+.3f} rise {s['rise']:+.3f} "
              f"interval {s['interval']} one-sided lower {s['lower']}")  # nan: a step without such rollouts
        if role not in GATED:
            continue
        assert learning.learned(s, MARGIN[role]), (
            f"{role} reward did not rise by {MARGIN[role]} with a one-sided 95% bound above 0 over seeds {SEEDS}: {s}")


@pytest.mark.slow
def test_planted_environment_learns_on_multilora(planted_bug):
    _assert_learns(learning.run_planted(SEEDS, QUICK_STEPS, [*learning.BACKENDS["multilora"], *QUICK]), planted_bug)


@pytest.mark.slow
@pytest.mark.paper
def test_planted_environment_learns_on_peft(planted_bug):
    """In `make test-paper`, not `make test`: there PEFT is held to multi-LoRA, whose learning test above runs in
    make test (tests/platform/test_multilora.py: the same update, and after it the same greedy rows of the trained
    adapters, not the base's: red with stale_generator planted)."""
    _assert_learns(learning.run_planted(SEEDS, QUICK_STEPS, [*learning.BACKENDS["peft"], *QUICK]), planted_bug)


@pytest.mark.slow
@pytest.mark.paper
def test_planted_environment_learns_on_ray_data_parallel(planted_bug):
    """Two data-parallel Ray workers (each a multi-LoRA model worker: generation and the update's shards, gradients
    all-reduced), 18 steps: 12 are too few here (+0.18 [-0.12, +0.48], docs/learning.md). A planted bug reaches the
    driver from the fixture and the workers from their start-up (tests/subprocess_site/sitecustomize.py: the test
    processes' PYTHONPATH holds it, and Ray's workers inherit it).

    In `make test-paper`, not `make test` (~210 s of CPU, a seventh of the suite's): make test holds the workers to
    the one process instead (tests/platform/test_data_parallel.py: the same update, and after it the same sampled
    rows, as the one-process multi-LoRA backend, whose learning test above runs in make test)."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'populora-platform[ray]'")
    if ray.is_initialized():  # the Ray unit's shared 2-CPU instance cannot hold the 2.5 CPUs these actors reserve
        ray.shutdown()
    _assert_learns(learning.run_planted(SEEDS, RAY_STEPS, [*learning.BACKENDS["ray"], *QUICK[:2]]), planted_bug)


# ------------------------------------------------------------------------------ log-probs at the sampling temperature


def test_trainer_log_probs_are_the_samplers(planted_bug):
    """The sampler's answer frequencies at ``tasks.temperature`` match the trainer's probabilities of those answers
    (what the PPO ratio divides by): a chi-square goodness-of-fit over the ten digits, on an adapter made
    non-uniform (random LoRA weights). A trainer at another temperature sharpens or flattens them: red."""
    cfg = learning.planted_config(["tasks.temperature=0.8"])  # the default sampling temperature, not 1
    T, n = cfg.tasks.temperature, 600
    trainer_t = update.update_options(cfg)["temperature"]  # what the update's log-probs are taken at
    backend = make_backend(BackendConfig(base=str(planted_base.base_dir()), device="cpu", kind="multilora", slots=1,
                                         lora=LoraSpec(rank=4, alpha=8, target_modules=tuple(cfg.model.target_modules))))
    backend.add_adapter("S", seed=0)
    g = torch.Generator().manual_seed(0)
    backend.set_adapter_state("S", {k: torch.randn(v.shape, generator=g) * 0.3 for k, v in backend.adapter_state("S").items()})
    prompt = render(backend, planted.Planted().student_prompt(Task("s", planted.KIND, planted.PROGRAM, input="3"), "azr"), "azr", "azr")
    gens = backend.generate([prompt] * n, ["S"] * n, 1, temperature=T, seed=0)
    tok = backend.tokenizer
    digit_ids = [tok.convert_tokens_to_ids(d) for d in planted.DIGITS]
    counts = np.array([sum(g.completion_ids[:1] == [i] for g in gens) for i in digit_ids] + [0])
    counts[-1] = n - counts[:-1].sum()
    logp, _ = backend.sequence_logprobs("S", [gens[0].prompt_ids] * len(digit_ids), [[i] for i in digit_ids],
                                        temperature=trainer_t)
    p = logp[:, 0].detach().exp().double().numpy()
    expected = np.append(p, max(0.0, 1 - p.sum())) * n
    keep = expected > 5  # chi-square's rule of thumb; the rest pooled
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    print(f"frequencies {counts.tolist()}, trainer {np.round(p * n, 1).tolist()}")
    stat, pvalue = scipy_stats.chisquare(obs, exp * obs.sum() / exp.sum())
    assert pvalue > 1e-3, f"sampler frequencies {counts.tolist()} vs trainer probabilities {np.round(p, 3).tolist()}: p={pvalue:.2g}"
