"""Scale-out on a local Ray instance (conftest's shared ``local_ray``, 2 CPUs): a tiny population end to end, and
one seeded step giving the same result as the local path."""

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'populora-platform[ray]'")

from populora.platform import config as config_io  # noqa: E402
from populora.platform.store.runlayout import STEP_SENTINEL  # noqa: E402
from populora.training.config import TrainConfig  # noqa: E402
from populora.training.loop import Trainer  # noqa: E402

# step-0 seeding: one round of 2 proposals per kind (the default, 2 rounds of 8, is ~7 s of CPU per run; the tiny
# model proposes nothing valid either way, and its buffers fall back to the hand-written programs)
TINY = ["steps=2", "model.tiny_random=true", "model.lora_rank=4", "tasks.max_new_tokens_propose=24",
        "tasks.seed_buffer=2", "tasks.seed_rounds=1", "tasks.max_new_tokens_solve=8", "tasks.tasks_per_teacher=2",
        "evolution.every=2", "population.teachers=2", "population.students=2", "ray.cpus_per_model_worker=0.5",
        "ray.cpus_per_sandbox_worker=0.5"]


def _step(overrides):
    """One step: its record, every member's adapter and the backend's class; the run's workers then ended."""
    cfg = config_io.load(TrainConfig, None, TINY + overrides)
    trainer = Trainer.create(cfg)
    try:
        record = trainer.step()
        states = {m.id: trainer.backend.adapter_state(m.id) for m in trainer.population.alive()}
        return type(trainer.backend).__name__, record, states
    finally:
        trainer.close()


def test_the_local_instance_runs_its_workers_at_the_niceness_of_this_process(local_ray):
    """Ray's own default is niceness 15 for every worker (the run's training and generation): the platform's local
    start sets 0 (backends/ray.py LOCAL_SYSTEM_CONFIG)."""
    @ray.remote(num_cpus=0)
    def niceness() -> int:
        import os

        return os.nice(0)

    assert ray.get(niceness.remote()) == 0


def test_one_seeded_step_on_ray_equals_the_local_path(local_ray, mlflow_store):
    _, local_record, local_states = _step([])
    backend, ray_record, ray_states = _step(["ray.address=local", "ray.model_workers=1", "ray.sandbox_workers=2"])
    assert backend == "RayBackend"
    assert [t["program"] for t in ray_record["tasks"]] == [t["program"] for t in local_record["tasks"]]
    assert [t["valid"] for t in ray_record["tasks"]] == [t["valid"] for t in local_record["tasks"]]
    assert ray_record["member_metrics"].keys() == local_record["member_metrics"].keys()
    for member, state in local_states.items():
        for k, v in state.items():
            assert torch.allclose(v, ray_states[member][k], atol=1e-6), (member, k)


def test_tiny_population_end_to_end_over_two_model_workers(local_ray, mlflow_store):
    cfg = config_io.load(TrainConfig, None, TINY + ["ray.address=local", "ray.model_workers=2", "ray.sandbox_workers=1"])
    trainer = Trainer.create(cfg)
    try:
        assert set(trainer.backend.owner.values()) == {0, 1}  # members really spread over both workers
        trainer.train(progress=False)
    finally:
        trainer.close()
    run = trainer.log.tracker.get_run(trainer.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics[STEP_SENTINEL] == 2
    assert len(trainer.population.members) == 6  # 4 + one child per role at step 2
    for m in trainer.population.alive():
        assert (trainer.run_dir / "adapters" / m.id / "adapter_config.json").is_file()


# ---------------------------------------------------------------- the GPU path's Ray rules, without a cluster
from populora.platform.backends import BackendConfig, Generation, LoraSpec, RaySpec, make_backend  # noqa: E402
from populora.platform.backends.ray import RayBackend, RayError, _ModelWorker  # noqa: E402


@pytest.mark.parametrize("overrides, field", [
    ({"generation": "vllm"}, "model.generation=vllm"),
    ({"kind": "peft"}, "model.backend=peft"),
    ({"device": "cuda"}, "ray.gpus_per_worker=0"),
    ({"device": "cuda:1", "ray": RaySpec("local", gpus_per_worker=1)}, "model.device=cuda:1"),
])
def test_the_ray_path_refuses_settings_its_workers_would_ignore(overrides, field):
    """Before Ray starts: the factory names the field instead of silently running multi-LoRA on torch (or every
    worker on cuda:0: Ray 2.60 hides no GPU from an actor reserving none, ray/_private/accelerators/accelerator.py)."""
    config = dict(tiny_random=True, device="cpu", lora=LoraSpec(rank=4), ray=RaySpec("local"))
    config.update(overrides)
    with pytest.raises(RayError, match=field.replace(".", r"\.")):
        make_backend(BackendConfig(**config))


def test_results_leave_a_worker_as_cpu_tensors():
    """A worker on a GPU returns adapter and optimizer state: CUDA tensors (fake ones here, FakeTensorMode on the
    cuda device) must come back to the driver on the CPU, as Ray would otherwise unpickle them onto cuda:0."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    class OnGpu:
        def adapter_state(self, name):
            return {"a.lora_A.weight": torch.empty(4, 8, device="cuda")}

        def optimizer_state(self, name):
            return {"step": 3, "exp_avg": [torch.empty(4, device="cuda")], "exp_avg_sq": [torch.empty(4, device="cuda")]}

        def sequence_logprobs(self, *args):
            return torch.empty(2, 3, device="cuda"), torch.empty(2, 3, device="cuda")

    worker = object.__new__(_ModelWorker)
    worker.backend = OnGpu()
    with FakeTensorMode():
        state = worker.call("adapter_state", "S0")
        opt = worker.call("optimizer_state", "S0")
        logp, mask = worker.call("sequence_logprobs", None, [[1]], [[2]])
    assert state["a.lora_A.weight"].device.type == "cpu"
    assert opt["step"] == 3 and all(t.device.type == "cpu" for t in opt["exp_avg"] + opt["exp_avg_sq"])
    assert logp.device.type == mask.device.type == "cpu"


def test_base_rows_are_dealt_over_every_worker_and_each_worker_samples_its_own_stream():
    """Step-0 seeding is hundreds of base-model rows: every worker holds the base, so all take a share."""
    calls = []

    class Worker:
        def __init__(self, w):
            self.call = type("Remote", (), {"remote": lambda _, *a, **k: self._call(*a, **k)})()
            self.w = w

        def _call(self, method, prompts, adapters, max_new_tokens, seed=None, **kwargs):
            calls.append((self.w, list(prompts), seed))
            return [Generation(p, f"w{self.w}", [], []) for p in prompts]

    backend = object.__new__(RayBackend)
    backend.ray = type("Ray", (), {"get": staticmethod(lambda futures: futures)})()
    backend.workers, backend.owner = [Worker(0), Worker(1)], {"T0": 1}
    prompts = [f"p{i}" for i in range(6)]
    gens = backend.generate(prompts, [None] * 5 + ["T0"], 8, seed=10)
    assert [g.prompt for g in gens] == prompts  # back in the callers' order
    rows = {w: p for w, p, _ in calls}
    assert rows == {0: ["p0", "p2", "p4"], 1: ["p1", "p3", "p5"]}
    assert {w: s for w, _, s in calls} == {0: 10, 1: 10 + 1_000_003}  # worker 0 = the local path's stream


def test_a_training_config_with_settings_ray_would_ignore_is_refused_at_load():
    from populora.platform.config import ConfigError

    with pytest.raises(ConfigError, match=r"model\.generation=vllm .*set model\.generation=torch"):
        config_io.load(TrainConfig, None, ["ray.address=local", "model.generation=vllm"])
    with pytest.raises(ConfigError, match=r"set ray\.gpus_per_worker=1"):
        config_io.load(TrainConfig, None, ["ray.address=auto", "model.device=cuda"])
    assert config_io.load(TrainConfig, None, ["ray.address=auto", "model.device=cuda", "ray.gpus_per_worker=1"])
