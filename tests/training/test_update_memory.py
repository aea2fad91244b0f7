"""Two memory rules of the update and evolution at paper scale: an evolved child takes its dead member's slot (the
batched multi-LoRA stacks never double), and the KL's base forward runs one step in ``optim.kl_every``."""

import numpy as np
import torch

from populora.platform import config as config_io
from populora.platform.backends import AdamConfig, LoraSpec, MultiLoraBackend
from populora.training.config import TrainConfig
from populora.training.evolve.evolution import evolve
from populora.training.evolve.lineage import Lineage
from populora.training.member import STUDENT, TEACHER, Member, Population
from populora.training.phases.rollout import Rollout
from populora.training.phases.update import update


def test_evolution_reuses_the_dead_members_slot(tiny_model, tmp_path):
    model, tok = tiny_model
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4), initial_slots=4)
    try:
        cfg = config_io.load(TrainConfig, None, ["population.teachers=2", "population.students=2",
                                                  "evolution.replace_fraction=0.5"])
        population = Population()
        for i, role in enumerate([TEACHER, TEACHER, STUDENT, STUDENT]):
            m = population.add(Member(population.new_id(role), role, 4))
            backend.add_adapter(m.id, seed=i)
            backend.init_optimizer(m.id, AdamConfig(lr=1e-3))
        capacity = next(iter(backend.layers.values())).lora_A.shape[0]
        replaced = evolve(population, backend, Lineage(), cfg, 2, np.random.default_rng(0), torch.Generator().manual_seed(0),
                          tmp_path)
        assert len(replaced) == 2
        assert next(iter(backend.layers.values())).lora_A.shape[0] == capacity  # no growth: 4 members + slot 0
        for dead, child in replaced:
            assert dead.id not in backend.slots and child.id in backend.slots
            assert (tmp_path / dead.id / "adapter_config.json").is_file()  # saved before it left
    finally:
        backend.unwrap()


def test_kl_is_computed_one_step_in_kl_every():
    seen = []

    class Recorder:
        def train_step(self, batches, micro_batch, max_len, grad_clip, kl_coef, log_kl, **clipped):
            seen.append(log_kl)
            return {"T0": {"loss": 0.0}}

    cfg = config_io.load(TrainConfig, None, ["optim.kl_every=3"])
    rollouts = [Rollout("T0", "teacher", "code_o", "t", [1, 2], [3, 4], "x", reward=1.0),
                Rollout("T0", "teacher", "code_o", "u", [1, 2], [5], "y", reward=0.0)]
    for step in range(1, 7):
        update(Recorder(), rollouts, cfg, step)
    assert seen == [False, False, True, False, False, True]


def test_a_step_without_the_kl_forward_logs_no_kl(tiny_model):
    from populora.platform.backends import TrainSample

    model, tok = tiny_model
    backend = MultiLoraBackend(model, tok, LoraSpec(rank=4), initial_slots=1)
    try:
        backend.add_adapter("T0", seed=0)
        backend.init_optimizer("T0", AdamConfig(lr=1e-3))
        samples = [TrainSample([1, 2, 3], [4, 5], 1.0), TrainSample([6, 7], [8], -1.0)]
        without = backend.train_step({"T0": samples}, log_kl=False)["T0"]
        with_kl = backend.train_step({"T0": samples}, log_kl=True)["T0"]
        assert "kl" not in without and all("kl" not in m for m in without["per_mini_batch"])  # not a false 0
        assert "kl" in with_kl
    finally:
        backend.unwrap()
