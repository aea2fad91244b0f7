"""Tests only: the planted bugs of tests/training/test_learns.py, each a function that patches one well-named seam
with ``setattr(target, name, value)`` (pytest's ``MonkeyPatch.setattr`` in the test process, the builtin in a
process the tests start).

A bug must reach where its seam runs: the test process plants it itself (test_learns.py's ``planted_bug``
fixture); Ray's workers (the data-parallel backend's generation and update) and a ``populora`` CLI process plant
it at start-up, from ``sitecustomize`` (``plant_at_start``), when ``POPULORA_PLANTED_BUG`` names one. So

    POPULORA_PLANTED_BUG=update_sign PYTHONPATH=tests/subprocess_site populora bench learn --backend ray --json

runs the planted environment with the update's sign flipped in the driver and in both workers.
"""

from __future__ import annotations

import os
import sys

ENV = "POPULORA_PLANTED_BUG"
WRONG_T = 0.5  # log_probs_temperature: the trainer's temperature (the samples' is tasks.temperature)


def update_sign(setattr):
    """The update's sign flipped: the clipped surrogate sees -A (both in-process backends' loss; the data-parallel
    workers run multi-LoRA's)."""
    from populora.platform.backends import multilora, peft

    for module in (multilora, peft):
        orig = module.row_terms
        setattr(module, "row_terms", lambda logp, mask, old, adv, *a, _o=orig: _o(logp, mask, old, -adv, *a))


def advantages_zero(setattr):
    """TRR++ gives every rollout advantage 0 (on the driver, whatever the backend)."""
    import numpy as np

    from populora.training.phases import update

    setattr(update, "task_relative_advantages", lambda rewards, *a, **k: np.zeros(len(rewards)))


def lr_zero(setattr):
    """Every adapter's optimizer built with learning rate 0 (its config validates lr > 0: set on the optimizer)."""
    from populora.platform.backends import multilora, peft

    def zero(opt):
        for group in getattr(opt, "param_groups", []):  # torch AdamW (PEFT)
            group["lr"] = 0.0
        if hasattr(opt, "lr"):  # SlotAdam (multi-LoRA)
            opt.lr = 0.0
        return opt

    for module in (multilora, peft):
        orig = module.make_optimizer
        setattr(module, "make_optimizer", lambda *a, _o=orig, **k: zero(_o(*a, **k)))


def stale_generator(setattr):
    """The generator keeps serving the adapters as they were before any update (fresh LoRA: the base): the torch
    backends' ``generate``, the data-parallel workers' seeded sampling, and the vLLM engine, which loads each
    adapter once and never again (``VllmBackend._sync`` skips an adapter it already serves)."""
    from populora.platform.backends import BASE, seeded_sampling
    from populora.platform.backends.multilora import MultiLoraBackend
    from populora.platform.backends.peft import PeftBackend
    from populora.platform.backends.vllm import VllmBackend

    for cls in (MultiLoraBackend, PeftBackend):
        orig = cls.generate
        setattr(cls, "generate", lambda self, prompts, adapters, *a, _o=orig, **k: _o(self, prompts, [BASE] * len(adapters), *a, **k))
    orig_sampling = seeded_sampling.generate
    setattr(seeded_sampling, "generate", lambda backend, prompts, adapters, *a, _o=orig_sampling, **k:
            _o(backend, prompts, [BASE] * len(adapters), *a, **k))
    orig_sync = VllmBackend._sync

    def first_load_only(self, _o=orig_sync):
        self.stale = {n for n in self.stale if n not in self.requests}
        _o(self)

    setattr(VllmBackend, "_sync", first_load_only)


def log_probs_temperature(setattr):
    """The trainer's log-probs at temperature ``WRONG_T``, not the sampling one: the one seam every backend's
    log-probs read their temperature from (``update.update_options``, ``UpdateSpec.temperature``)."""
    from populora.training.phases import update

    orig = update.update_options
    setattr(update, "update_options", lambda cfg, _o=orig: {**_o(cfg), "temperature": WRONG_T})


BUGS = {f.__name__: f for f in (update_sign, advantages_zero, lr_zero, stale_generator, log_probs_temperature)}


def plant(name: str, setattr) -> None:
    if name not in BUGS:
        raise ValueError(f"{ENV}={name!r}: not one of {sorted(BUGS)}")
    BUGS[name](setattr)


def plant_at_start() -> None:
    """From ``sitecustomize``: plant ``$POPULORA_PLANTED_BUG`` in a Ray worker or a ``populora`` CLI process (the
    test process plants it with its fixture: planted twice, a flipped sign would flip back)."""
    name = os.environ.get(ENV)
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name and (argv0 == "populora" or "default_worker" in argv0):
        import builtins

        plant(name, builtins.setattr)
        print(f"planted bug {name} in pid {os.getpid()} ({argv0})", file=sys.stderr, flush=True)  # the run's log shows it
