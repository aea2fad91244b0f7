"""`populora plan`: memory against published figures, compute-matched presets, the fits verdict and its knob."""

import json

import pytest

from populora.evaluation.statistics import power
from populora.platform import config as config_io
from populora.platform import plan
from populora.training.config import TrainConfig
from populora.training.compute.workload import counts, make_plan
from conftest import ROOT, cli_in_process

PRESETS = ["paper-4t4s", "paper-4t8s", "paper-1t1s"]


def _plan(name, *overrides, **kwargs):
    return make_plan(config_io.load(TrainConfig, ROOT / "configs" / f"{name}.yaml", list(overrides)), **kwargs)


@pytest.mark.parametrize("name, params_b", [("qwen2.5-7b", 7.62), ("qwen2.5-0.5b", 0.49), ("qwen2.5-72b", 72.7),
                                            ("llama-3.1-8b", 8.03), ("llama-3.1-70b", 70.6), ("smollm2-135m", 0.135)])
def test_parameter_counts_match_published_sizes(name, params_b):
    arch, _ = plan.find_architecture(name)
    assert arch.params() / 1e9 == pytest.approx(params_b, rel=0.01)


def test_qwen7b_lora_r16_on_all_linears_is_40m_params():
    arch, _ = plan.find_architecture("Qwen/Qwen2.5-7B-Instruct")
    assert arch.lora_params(16, list(arch.linear_shapes())) == 28 * 16 * (7168 + 4096 + 4096 + 7168 + 3 * 22528)


def test_plan_json_of_the_paper_presets(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    baseline = None
    for name in ["paper-baseline", *PRESETS]:
        code = cli_in_process("plan", "--config", str(ROOT / "configs" / f"{name}.yaml"), "--json")
        out = capsys.readouterr()
        assert code == 0, out.err
        p = json.loads(out.out.strip().splitlines()[-1])
        assert set(p["memory_gb"]) >= {"base_weights", "adapters", "optimizer", "activations", "total"}
        assert p["memory_gb"]["base_weights"] == pytest.approx(15.2, abs=0.1)  # Qwen2.5-7B in bf16
        assert isinstance(p["fits"], bool) and p["step_time_s"] > 0
        # before launch: the smallest difference one seed (these adapters) and three seeds (the method) detect
        assert p["mde"]["one_seed"]["level"] == "adapters" and p["mde"]["three_seeds"]["seeds"] == 3
        assert p["mde"]["three_seeds"]["overall"] > p["mde"]["one_seed"]["overall"] > 0  # the seed variance costs
        assert "1 seed per arm detects, in these adapters on these problems, >= " in out.out
        assert p["mde"]["three_seeds"]["words"] == power.planned(3)["words"]  # the dry run's, the form's
        assert p["mde"]["three_seeds"]["words"] in out.out
        baseline = baseline or p["per_adapter"]
        for key in ("generated_tokens", "trained_tokens", "tflops"):  # compute-matched to the baseline
            assert p["per_adapter"][key] == pytest.approx(baseline[key], rel=0.10), (name, key)


def test_counts_follow_matchmaking():
    cfg = config_io.load(TrainConfig, None, ["population.teachers=4", "population.students=4", "matchmaking.teachers_per_student=4",
                                             "tasks.tasks_per_teacher=2", "tasks.rollouts=3"])
    assert counts(cfg) == {"adapters": 8, "propose_rows": 8, "solve_rows": 4 * 4 * 2 * 3}  # every teacher drawn
    single = config_io.load(TrainConfig, None, ["population.single_agent=true", "tasks.tasks_per_teacher=5", "tasks.rollouts=2"])
    assert counts(single) == {"adapters": 1, "propose_rows": 5, "solve_rows": 10}


def test_a_config_that_does_not_fit_names_the_knob_and_the_fix_fits():
    big = _plan("paper-4t4s", "model.generation=torch", "optim.micro_batch=8", gpu="a100-40gb")
    assert not big["fits"] and "optim.micro_batch" in big["advice"]
    knobs = [a.split("=")[0].split()[-1] + "=" + a.split("=")[1].split()[0].rstrip(",") for a in big["advice"].split("set ")[1].split(" and ")]
    assert _plan("paper-4t4s", "model.generation=torch", "optim.micro_batch=8", *[k.split(" (")[0] for k in knobs],
                 gpu="a100-40gb")["fits"]
    with_vllm = _plan("paper-4t4s", gpu="a100-40gb")  # vLLM's share, not the activations, is what does not fit
    assert not with_vllm["fits"] and "model.vllm_gpu_memory" in with_vllm["advice"]
    small = _plan("paper-baseline", "model.base=Qwen/Qwen2.5-0.5B", "optim.micro_batch=1", "optim.max_seq_len=1024", gpu="rtx4090-24gb")
    assert small["fits"], small["advice"]


def test_vllm_and_training_memory_are_alternatives_not_a_sum():
    """vLLM sleeps while torch trains (backends/vllm.py): the GPU holds vLLM's share or the activations."""
    p = _plan("paper-4t4s")
    m = p["memory_gb"]
    assert m["vllm"] == pytest.approx(0.45 * 80 * 2**30 / 1e9)
    fixed = m["base_weights"] + m["adapters"] + m["optimizer"]
    assert m["total"] == pytest.approx(fixed + max(m["vllm"], m["activations"]))
    assert p["fits"], p["advice"]  # with a sum it would need 92.4 GB of 79


def test_chunked_logits_reused_slots_and_kl_every_k_in_the_plan():
    """The LM head runs on 256 completion positions at a time (backends/logprobs.py), evolution reuses the dead
    member's slot (no doubling), and the KL's base forward runs on 1 step in kl_every."""
    p = _plan("paper-4t4s")
    arch, _ = plan.find_architecture("Qwen/Qwen2.5-7B")
    chunk = plan.LOGIT_CHUNK * arch.logit_bytes_per_token(2)
    assert arch.train_bytes(2, ["q_proj"], 6144, 2048, True) - arch.train_bytes(2, ["q_proj"], 6144, 256, True) == 0
    assert chunk * 4 / 1e9 < 4  # one chunk's vocabulary-wide tensors at micro_batch 4: ~3.7 GB, not 12.5 for 2048
    lora = arch.lora_params(16, list(arch.linear_shapes())) * plan.LORA_BYTES
    assert p["memory_gb"]["adapters"] == pytest.approx(2 * 9 * lora / 1e9)  # 8 members + slot 0, never 18
    every = _plan("paper-4t4s", "optim.kl_every=10")
    assert every["per_step"]["tflops"]["train"] < p["per_step"]["tflops"]["train"] * 0.9


def test_multi_gpu_time_follows_member_placement():
    """by_member, 4t4s on 8 GPUs: one member per worker, so the step waits for the busiest student: ~4.5x, not 8x."""
    by_member = ("model.generation=torch", "ray.placement=by_member")
    one, eight = _plan("paper-4t4s", *by_member), _plan("paper-4t4s", *by_member, gpus=8)
    assert eight["placement"] == "by_member"
    assert 4 < eight["gpu_speedup"]["generate"] < 5 and 4 < eight["gpu_speedup"]["train"] < 5
    assert eight["step_time_s"] == pytest.approx(one["step_time_s"] / 4.5, rel=0.1)
    assert _plan("paper-baseline", *by_member, gpus=4)["gpu_speedup"] == {"generate": 1.0, "train": 1.0}


def test_data_parallel_is_the_gpu_default_and_scales_the_baseline_with_the_gpus():
    """data_parallel deals every row over every GPU: the single-agent baseline on 8 GPUs ~8x faster than on 1
    (plus a ~10 ms all-reduce), each GPU holding every adapter; by_member leaves it on one GPU."""
    one, eight = _plan("paper-baseline"), _plan("paper-baseline", gpus=8)
    assert eight["placement"] == "data_parallel"  # model.device cuda: the default
    assert eight["gpu_speedup"] == {"generate": 8.0, "train": 8.0}
    assert eight["step_time_s"] == pytest.approx(one["step_time_s"] / 8, rel=0.01)
    assert 0 < eight["step_time_split_s"]["allreduce"] < 0.1
    assert eight["placements"]["by_member"]["step_time_s"] == pytest.approx(one["step_time_s"])
    dp, bm = (_plan("paper-4t8s", gpus=4)["placements"][k] for k in ("data_parallel", "by_member"))
    assert dp["memory_gb"]["adapters"] > 2.5 * bm["memory_gb"]["adapters"]  # every adapter on every GPU
    # 12 members on 4 GPUs split evenly either way (the all-reduce then costs data_parallel a little); 4t4s on 8
    # does not: by_member waits for the busiest student
    assert dp["step_time_s"] == pytest.approx(bm["step_time_s"], rel=0.01)
    dp, bm = (_plan("paper-4t4s", gpus=8)["placements"][k] for k in ("data_parallel", "by_member"))
    assert dp["gpu_speedup"]["generate"] == pytest.approx(8, rel=0.02) and dp["step_time_s"] < bm["step_time_s"] / 1.6


def test_vllm_share_is_counted_and_more_gpus_split_the_adapters():
    one = _plan("paper-4t8s", "model.generation=vllm")
    assert one["memory_gb"]["vllm"] == pytest.approx(0.45 * 80 * 2**30 / 1e9)
    four = _plan("paper-4t8s", "ray.placement=by_member", gpus=4)
    assert four["memory_gb"]["adapters"] < one["memory_gb"]["adapters"] / 3
    assert four["memory_gb"]["base_weights"] == one["memory_gb"]["base_weights"]  # each GPU holds the whole base
    assert four["step_time_s"] < _plan("paper-4t8s")["step_time_s"] / 3


def test_unknown_base_names_the_flag(tmp_path):
    with pytest.raises(plan.PlanError, match="--arch-config"):
        _plan("paper-baseline", "model.base=someone/unknown-model")
    cfg_json = tmp_path / "config.json"
    cfg_json.write_text(json.dumps({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                                    "num_key_value_heads": 2, "vocab_size": 1000, "model_type": "llama"}))
    p = _plan("paper-baseline", "model.base=someone/unknown-model", arch_config=str(cfg_json))
    assert p["architecture_from"] == str(cfg_json) and p["fits"]


@pytest.mark.parametrize("name", ["paper-baseline", *PRESETS])
def test_paper_presets_generate_with_vllm(name):
    assert config_io.load(TrainConfig, ROOT / "configs" / f"{name}.yaml", []).model.generation == "vllm"


@pytest.mark.parametrize("name", ["paper-baseline", *PRESETS])
def test_paper_presets_fit_one_80gb_gpu_with_activation_checkpointing(name):
    on = _plan(name)
    assert on["fits"], on["advice"]
    off = _plan(name, "model.activation_checkpointing=false")
    assert not off["fits"] and "set model.activation_checkpointing=true" in off["advice"]
    assert on["memory_gb"]["activations"] < off["memory_gb"]["activations"] / 5
    # the price: one more forward per trained token
    assert on["step_time_s"] > off["step_time_s"]


@pytest.mark.parametrize("population, baseline", [("smoke", "baseline"), ("arms-race-cpu", "arms-race-cpu-baseline")])
def test_cpu_pairs_are_compute_matched_per_adapter(population, baseline):
    """The demo and the arms race compare a population with its baseline: the same work per adapter (the rule of
    the paper presets: the baseline proposes a teacher's share and answers with teachers_per_student x rollouts)."""
    pop, base = _plan(population), _plan(baseline)
    for key in ("generated_tokens", "trained_tokens"):
        assert pop["per_adapter"][key] == pytest.approx(base["per_adapter"][key], rel=0.10), key
