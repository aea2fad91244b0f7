"""Scale-out on a local Ray instance (ray.init(num_cpus=2)): a tiny population end to end, and one seeded step
giving the same result as the local path."""

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'populora[ray]'")

from populora.platform import config as config_io  # noqa: E402
from populora.platform.runlayout import STEP_SENTINEL  # noqa: E402
from populora.training.config import TrainConfig  # noqa: E402
from populora.training.loop import Trainer  # noqa: E402

TINY = ["steps=2", "model.tiny_random=true", "model.lora_rank=4", "tasks.max_new_tokens_propose=24",
        "tasks.max_new_tokens_solve=8", "tasks.tasks_per_teacher=2", "evolution.every=2", "population.teachers=2",
        "population.students=2", "ray.cpus_per_model_worker=0.5", "ray.cpus_per_sandbox_worker=0.5"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _step(overrides):
    cfg = config_io.load(TrainConfig, None, TINY + overrides)
    trainer = Trainer.create(cfg)
    record = trainer.step()
    states = {m.id: trainer.backend.adapter_state(m.id) for m in trainer.population.alive()}
    return trainer, record, states


def test_one_seeded_step_on_ray_equals_the_local_path(local_ray, mlflow_store):
    _, local_record, local_states = _step([])
    trainer, ray_record, ray_states = _step(["ray.address=local", "ray.model_workers=1", "ray.sandbox_workers=2"])
    assert type(trainer.backend).__name__ == "RayBackend"
    assert [t["program"] for t in ray_record["tasks"]] == [t["program"] for t in local_record["tasks"]]
    assert [t["valid"] for t in ray_record["tasks"]] == [t["valid"] for t in local_record["tasks"]]
    assert ray_record["member_metrics"].keys() == local_record["member_metrics"].keys()
    for member, state in local_states.items():
        for k, v in state.items():
            assert torch.allclose(v, ray_states[member][k], atol=1e-6), (member, k)


def test_tiny_population_end_to_end_over_two_model_workers(local_ray, mlflow_store):
    cfg = config_io.load(TrainConfig, None, TINY + ["ray.address=local", "ray.model_workers=2", "ray.sandbox_workers=1"])
    trainer = Trainer.create(cfg)
    assert set(trainer.backend.owner.values()) == {0, 1}  # members really spread over both workers
    trainer.train(progress=False)
    run = trainer.log.tracker.get_run(trainer.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics[STEP_SENTINEL] == 2
    assert len(trainer.population.members) == 6  # 4 + one child per role at step 2
    for m in trainer.population.alive():
        assert (trainer.run_dir / "adapters" / m.id / "adapter_config.json").is_file()
