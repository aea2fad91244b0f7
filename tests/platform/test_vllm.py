"""The vLLM generation backend. This machine has no GPU: the contract test on a real engine skips with that reason;
what runs everywhere is the clear error when vLLM is chosen but missing."""

import importlib.util
import os

import pytest
import torch

from populora.platform import config as config_io
from populora.training.config import TrainConfig
from populora.platform.backends import make_backend
from populora.training.loop import backend_config

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here; the missing-vLLM error cannot be shown")
def test_choosing_vllm_without_it_is_a_clear_error():
    from populora.platform.backends.vllm import VllmUnavailable

    cfg = config_io.load(TrainConfig, None, ["model.generation=vllm", "model.tiny_random=true"])
    with pytest.raises(VllmUnavailable, match=r"pip install 'populora-platform\[vllm\]'"):
        make_backend(backend_config(cfg))


@pytest.mark.skipif(not (HAS_VLLM and torch.cuda.is_available()), reason="needs vLLM and a CUDA GPU (none on this machine)")
def test_vllm_generation_matches_the_backend_contract(tmp_path):
    cfg = config_io.load(TrainConfig, None, ["model.generation=vllm", "model.base=HuggingFaceTB/SmolLM2-135M-Instruct",
                                              "model.device=cuda", f"output_dir={tmp_path}"])
    backend = make_backend(backend_config(cfg))
    backend.add_adapter("T0", seed=0)
    prompt = backend.encode_chat([{"role": "user", "content": "Say hi"}])
    gens = backend.generate([prompt, prompt], ["T0", None], 8, temperature=0)
    assert len(gens) == 2 and all(g.completion_ids for g in gens)
    assert gens[0].text == gens[1].text  # a fresh adapter (B = 0) is the base model


# ---------------------------------------------------------------- the GPU path on a stub engine (vllm_stub.py)
import logging  # noqa: E402
import threading  # noqa: E402

import vllm_stub  # noqa: E402
from conftest import wait_for  # noqa: E402
from populora.platform.backends import BackendConfig, LoraSpec  # noqa: E402
from populora.platform.backends import generation  # noqa: E402


@pytest.fixture
def stub_vllm(monkeypatch):
    vllm_stub.install(monkeypatch)
    return vllm_stub


BUILT = []  # the backends a test built, closed after it


@pytest.fixture(autouse=True)
def _closed():
    """Each backend a test builds is closed after it: one with engine processes has a reaper (reaper.py) that would
    poll this test process for the rest of the session."""
    yield
    while BUILT:
        BUILT.pop().close()


def _build(config):
    backend = make_backend(config)
    BUILT.append(backend)
    return backend


def _vllm_backend(tmp_path, **kwargs):
    config = dict(tiny_random=True, device="cpu", generation="vllm", lora=LoraSpec(rank=8), slots=2,
                  vllm_sync_dir=str(tmp_path / "sync"))
    config.update(kwargs)
    backend = _build(BackendConfig(**config))
    backend.add_adapter("S0", seed=0)
    return backend


def test_rollouts_of_one_task_differ_and_repeat_from_the_run_seed(stub_vllm, tmp_path):
    """solve.py asks for a task's rollouts as repeated rows of one prompt: each row must get its own seed."""
    backend = _vllm_backend(tmp_path)
    prompt = backend.encode_chat([{"role": "user", "content": "What is 2 + 2?"}])
    texts = lambda seed: [g.text for g in backend.generate([prompt] * 4, ["S0"] * 4, 16, temperature=1.0, seed=seed)]
    first = texts(5)
    seeds = [p.seed for p in stub_vllm.LLM.instances[-1].params]
    assert len(set(seeds)) == 4 and seeds == generation.row_seeds(5, 4)
    assert len(set(first)) >= 2, "identical rollouts: the advantage groups carry no signal"
    assert texts(5) == first and texts(6) != first  # reproducible from the run seed, and it matters
    # why: the engine, like vLLM, repeats itself when one seed is shared by every row
    engine = backend.engine
    shared = engine.generate([{"prompt_token_ids": [5, 6, 7]}] * 4, stub_vllm.SamplingParams(max_tokens=16, seed=5))
    assert len({o.outputs[0].text for o in shared}) == 1


def test_vllm_sleeps_while_torch_trains_and_wakes_before_generating(stub_vllm, tmp_path, mlflow_store, monkeypatch):
    """Two real steps of the loop (with an evolution) on the stub engine: every update and evolution runs with
    vLLM asleep (level 1), and every generation after one is preceded by empty_cache, then wake_up."""
    from populora.platform.backends.multilora import MultiLoraBackend
    from populora.training.loop import Trainer

    events = stub_vllm.EVENTS
    for name in ("train_step", "set_adapter_state"):
        original = getattr(MultiLoraBackend, name)

        def traced(self, *args, _name=name, _original=original, **kwargs):
            events.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(MultiLoraBackend, name, traced)
    cfg = config_io.load(TrainConfig, None, [
        "steps=2", "model.tiny_random=true", "model.generation=vllm", "model.lora_rank=8", "tasks.max_new_tokens_propose=16",
        "tasks.max_new_tokens_solve=8", "tasks.tasks_per_teacher=2", "evolution.every=2", "population.teachers=2",
        "population.students=2", f"output_dir={tmp_path}"])
    trainer = Trainer.create(cfg)
    assert type(trainer.backend).__name__ == "VllmBackend"
    del events[:]
    trainer.step()
    trainer.step()
    assert events.count("train_step") == 2 and "set_adapter_state" in events  # updates and an evolution ran
    engine = [e for e in events if e not in ("train_step", "set_adapter_state")]
    for i, e in enumerate(events):
        if e in ("train_step", "set_adapter_state"):  # torch on the GPU: vLLM's last word was sleep
            last = [x for x in events[:i] if x in ("sleep(level=1)", "wake_up", "generate")]
            assert last[-1] == "sleep(level=1)", events
    for i, e in enumerate(engine):
        if e == "wake_up":
            assert engine[i - 1] == "empty_cache", engine
    first_after_update = events.index("train_step")
    later = events[first_after_update:]
    assert later.index("wake_up") < later.index("generate"), events  # the next step's propose wakes it first
    # upstream a request to a sleeping engine waits for wake_up: the backend must never send one
    assert "generate-while-asleep" not in events, events


def test_the_stand_in_blocks_a_generate_while_asleep_until_wake_up_as_vllm_does(stub_vllm):
    """vLLM 0.32.0 queues a request behind the paused scheduler of a sleeping engine (core.py pause_scheduler):
    generate returns only after wake_up. The stand-in must do the same for the test above to mean anything."""
    engine = stub_vllm.LLM("m")
    engine.sleep(level=1)
    done = []
    caller = threading.Thread(target=lambda: done.append(engine.generate([{"prompt_token_ids": [5, 6]}],
                                                                         stub_vllm.SamplingParams(max_tokens=2, seed=0))))
    caller.start()
    wait_for(lambda: "generate-while-asleep" in stub_vllm.EVENTS, 30, "the request to reach the sleeping engine")
    assert caller.is_alive() and done == []  # waiting, neither refused nor answered
    engine.wake_up()
    caller.join()
    assert len(done[0]) == 1 and stub_vllm.EVENTS[-1] == "generate"


def test_without_sleep_mode_the_engine_is_built_without_it_and_never_sleeps(stub_vllm, tmp_path, monkeypatch):
    """vLLM's CPU build has no sleep mode and refuses enable_sleep_mode=True at construction."""
    monkeypatch.setitem(stub_vllm.SLEEP_MODE, "available", False)
    with pytest.raises(ValueError, match="Sleep mode is not supported"):  # the engine itself, as upstream
        stub_vllm.LLM("m", enable_sleep_mode=True)
    backend = _vllm_backend(tmp_path)
    assert backend.engine.enable_sleep_mode is False
    backend.generate(["Hi"], ["S0"], 4, seed=0)
    backend.set_adapter_state("S0", backend.adapter_state("S0"))
    backend.generate(["Hi"], ["S0"], 4, seed=0)
    assert [e for e in stub_vllm.EVENTS if e.startswith(("sleep", "wake"))] == []


@pytest.mark.parametrize("engine, cpu, multiprocessing, reaper", [
    ("auto", False, "1", True), ("auto", True, "0", False), ("process", True, "1", True), ("inline", False, "0", False)])
def test_the_engine_runs_inline_on_vllms_cpu_build_and_in_its_own_processes_elsewhere(
        stub_vllm, tmp_path, monkeypatch, engine, cpu, multiprocessing, reaper):
    """auto: inline on vLLM's CPU build; the environment variable vLLM reads is set for the construction only,
    and a following reaper starts only where the engine has processes of its own."""
    monkeypatch.setitem(stub_vllm.PLATFORM, "cpu", cpu)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "7")  # what the caller had: put back after
    backend = _vllm_backend(tmp_path, vllm_engine=engine)
    assert backend.engine.multiprocessing == multiprocessing
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "7"
    assert backend.inline is (multiprocessing == "0") and (backend.reaper is not None) is reaper
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    _vllm_backend(tmp_path / "again", vllm_engine=engine)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ


def test_close_shuts_the_engine_and_ends_its_reaper(stub_vllm, tmp_path):
    """A closed backend leaves no reaper behind: before, each one polled its process's descendants every 0.5 s for
    as long as that process lived (13 of them in one test session, ~40 s of CPU)."""
    backend = _vllm_backend(tmp_path, vllm_engine="process")
    watcher = backend.reaper
    assert watcher is not None and watcher.poll() is None
    backend.close()
    assert stub_vllm.EVENTS[-1] == "shutdown" and backend.reaper is None
    assert watcher.poll() is not None  # reaped by stop(), not left to this process's exit
    backend.close()  # idempotent
    assert stub_vllm.EVENTS.count("shutdown") == 1


def test_a_replaced_adapters_old_id_leaves_the_engine_before_the_new_one_loads(stub_vllm, tmp_path):
    """vLLM's CPU LoRA path reads a base row's LoRA from the last slot (vllm PR 48421): with max_loras one more
    than the members and each old id removed before its new one loads, the members never take that slot."""
    backend = _vllm_backend(tmp_path, slots=3)
    assert backend.engine.max_loras == 4
    backend.generate(["Hi"], ["S0"], 4, seed=0)
    first = backend.requests["S0"].lora_int_id
    backend.set_adapter_state("S0", backend.adapter_state("S0"))
    backend.generate(["Hi"], ["S0"], 4, seed=0)
    assert backend.engine.removed == [first] and backend.requests["S0"].lora_int_id != first
    backend.remove_adapter("S0")
    backend.generate(["Hi"], [None], 4, seed=0)
    assert backend.engine.removed == [first, first + 1]


def test_a_prompt_longer_than_max_model_len_is_refused_alone(stub_vllm, tmp_path, caplog):
    backend = _vllm_backend(tmp_path, max_model_len=40)
    short, long = "Hi", " ".join(["word"] * 80)
    with caplog.at_level(logging.WARNING):
        gens = backend.generate([short, long, short], ["S0", None, None], 8, seed=0)
    assert gens[1].completion_ids == [] and gens[1].text == "" and len(gens[1].prompt_ids) >= 40
    assert gens[0].completion_ids and gens[2].completion_ids
    assert "model.max_model_len" in caplog.text


def test_max_model_len_comes_from_the_config(stub_vllm, tmp_path, mlflow_store):
    from populora.training.loop import backend_config

    cfg = config_io.load(TrainConfig, None, ["model.generation=vllm", "model.tiny_random=true", "optim.max_seq_len=3000"])
    assert backend_config(cfg).max_model_len == 3000
    _build(backend_config(cfg, tmp_path))
    assert stub_vllm.LLM.instances[-1].max_model_len == 3000


def test_an_odd_lora_rank_is_rounded_up_to_one_vllm_takes_and_said(stub_vllm, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="populora.platform.backends.vllm"):
        backend = _vllm_backend(tmp_path, lora=LoraSpec(rank=12))
    assert backend.engine.max_lora_rank == 16
    assert "max_lora_rank 16 for rank-12 adapters" in caplog.text
    with pytest.raises(ValueError, match="max_lora_rank"):  # what the engine itself does with 12
        stub_vllm.LLM("m", max_lora_rank=12)


def test_vllm_stops_at_the_end_of_a_turn_and_reads_our_token_ids(stub_vllm, tmp_path):
    backend = _vllm_backend(tmp_path)
    prompt = backend.encode_chat([{"role": "user", "content": "Hi"}])
    gen = backend.generate([prompt], ["S0"], 8, seed=0)[0]
    params = stub_vllm.LLM.instances[-1].params[-1]
    assert params.stop_token_ids == generation.stop_token_ids(backend.tokenizer)
    assert gen.prompt_ids == backend.tokenizer(prompt, add_special_tokens=False).input_ids


def test_a_removed_members_sync_dir_is_deleted(stub_vllm, tmp_path):
    backend = _vllm_backend(tmp_path)
    backend.generate(["Hi"], ["S0"], 4, seed=0)
    synced = backend.requests["S0"].lora_path
    assert (tmp_path / "sync").exists() and __import__("os").path.isdir(synced)
    backend.remove_adapter("S0")
    assert not __import__("os").path.exists(synced) and "S0" not in backend.requests


def test_generations_carry_the_engines_log_prob_of_each_sampled_token(stub_vllm, tmp_path):
    """What the update compares with the trainer's (rollout_correction.py): the log-probs of the distribution the
    engine sampled from (processed_logprobs, as veRL asks), one per completion token, in order."""
    backend = _vllm_backend(tmp_path)
    prompt = backend.encode_chat([{"role": "user", "content": "Hi"}])
    gens = backend.generate([prompt, prompt], ["S0", None], 8, seed=0)
    engine = stub_vllm.LLM.instances[-1]
    assert engine.logprobs_mode == "processed_logprobs" and all(p.logprobs == 0 for p in engine.params)
    for g, lora in zip(gens, engine.loras[-2:]):
        key = hash((tuple(g.prompt_ids), None if lora is None else lora.lora_path)) % 2**31  # the stub's logits
        table = torch.log_softmax(torch.randn(stub_vllm.VOCAB, generator=torch.Generator().manual_seed(key)), 0)
        assert g.logprobs == [float(table[t]) for t in g.completion_ids] and len(g.logprobs) == len(g.completion_ids)
