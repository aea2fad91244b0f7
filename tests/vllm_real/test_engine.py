"""``VllmBackend`` against the real vLLM engine (vLLM's CPU build 0.32.0), with the batched multi-LoRA backend
(the trainer behind it) as the reference: same base (the embedded SmolLM2-135M, fp32), same adapters.

One engine for the module (its start is most of the time). The tests run in file order and share the adapters:
A and B (rank 4, so the engine's ``max_lora_rank`` is 8, vLLM's next rank), later C (an evolution's child).
What a CPU cannot show (sleep's freed GPU memory, CUDA kernels) stays with the stand-in
(tests/platform/vllm_stub.py, tests/platform/test_vllm.py)."""

import logging

import pytest
import torch
from conftest import perturbed

from populora.platform.model import chat_template
from populora.platform.backends.vllm import CPU_KV_CACHE_BYTES
from populora.training.evolve import operators

pytestmark = pytest.mark.slow
DTYPE = "float32"  # the engine's (conftest.py's ``engine``, one for the module)
RANK = 4          # not one of vLLM's ranks: the backend asks the engine for 8
ALPHA = 8.0
MEMBERS = 3       # A, B, and C (the evolution's child): max_loras 4
ADAPTERS = {"A": 10, "B": 11}  # each adapter's B drawn from this seed (perturbed)
MAX_LEN = 192     # the engine's max_model_len (a small KV cache)
QUESTIONS = ("What is the capital of France?", "Write a Python function that adds two numbers.")


@pytest.fixture(scope="module")
def pair(engine):
    backend, trainer, _ = engine
    return backend, trainer


def prompts(backend, questions=QUESTIONS):
    return [backend.encode_chat([{"role": "user", "content": q}]) for q in questions]


def greedy(backend, rows, adapters, tokens=16, **kw):
    return [g.completion_ids for g in backend.generate(rows, adapters, tokens, temperature=0.0, seed=0, **kw)]


def test_the_engine_takes_the_rounded_lora_rank_and_has_no_sleep_mode_on_cpu(pair):
    backend, _ = pair
    config = backend.engine.llm_engine.vllm_config
    assert config.lora_config.max_lora_rank == 8 and config.lora_config.max_loras == MEMBERS + 1
    assert backend.can_sleep is False and config.model_config.enable_sleep_mode is False
    assert config.cache_config.kv_cache_memory_bytes == CPU_KV_CACHE_BYTES  # not 0.45 of the host's RAM
    backend.sleep()  # a no-op where vLLM has no sleep mode (and must not raise)
    assert not backend.engine.llm_engine.is_sleeping()


def test_greedy_tokens_equal_the_multilora_backend_for_every_adapter_and_the_base_in_one_batch(pair):
    """Also the GGUF cache's dir: before it named its architecture and kept the tied embedding, vLLM generated
    token 0 over and over from it."""
    backend, trainer = pair
    rows = prompts(backend) * 3
    adapters = ["A", "A", "B", "B", None, None]
    got, want = greedy(backend, rows, adapters), greedy(trainer, rows, adapters)
    assert got == want
    texts = [trainer.tokenizer.decode(ids) for ids in got]
    assert all(t.strip() for t in texts) and len(set(ids[0] for ids in got)) > 1, texts
    assert got[0:2] != got[4:6] and got[2:4] != got[4:6], "the adapters change some answer (else this shows nothing)"


def test_sampled_logprobs_equal_the_trainers_in_fp32(pair):
    """vLLM's own log-prob of each token it sampled (raw logits, temperature 1) against the trainer's forward.

    Asked for log-probs, vLLM also ranks each sampled token with ``batched_count_greater_than``, a function under
    ``torch.compile`` (vllm/v1/sample/ops/logprobs.py): compiling it on a CPU (inductor, a C++ build) cost ~25 s
    of CPU, a fifth of this file's, for a count the training never reads. The inline engine runs in this process,
    so ``force_eager`` runs it as plain torch here (as ``VllmBackend.generate`` does: vllm.eager_logprob_ranks);
    the log-probs are computed as before."""
    from vllm import SamplingParams

    backend, trainer = pair
    rows, adapters = prompts(backend) * 3, ["A", "A", "B", "B", None, None]
    backend.generate(rows[:1], ["A"], 1, seed=0)  # synced: backend.requests holds the current dirs
    ids = [trainer.tokenizer(p, add_special_tokens=False).input_ids for p in rows]
    params = [SamplingParams(max_tokens=24, temperature=1.0, seed=i, logprobs=0) for i in range(len(rows))]
    with torch.compiler.set_stance("force_eager"):
        outs = backend.engine.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False,
                                       lora_request=[None if a is None else backend.requests[a] for a in adapters])
    sampled = [list(o.outputs[0].token_ids) for o in outs]
    engine_lp = [[step[t].logprob for step, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)] for o in outs]
    lp, mask = trainer.rows_logprobs(adapters, ids, sampled)
    for row, (want, n) in enumerate(zip(engine_lp, mask.sum(1).long().tolist())):
        assert n == len(want) == len(sampled[row])
        diff = (lp[row, :n] - torch.tensor(want)).abs().max().item()
        assert diff < 1e-4, (row, adapters[row], diff)


def test_generations_carry_the_engines_logprobs_and_they_equal_the_trainers_in_fp32(pair):
    """The backend's own path (processed_logprobs, logprobs=0, the inline engine's eager rank): each generation's
    log-probs are the engine's of its sampled tokens; in fp32 they are the trainer's, so the mismatch the update
    logs (rollout_correction.py) is numerics only: k3 ~ 0, far below monitors.OUT_OF_SYNC_K3."""
    from populora.platform.backends import rollout_correction
    from populora.training.measures import monitors

    backend, trainer = pair
    rows, adapters = prompts(backend) * 2, ["A", "B", "A", None]
    gens = backend.generate(rows, adapters, 24, temperature=1.0, seed=3)
    lp, mask = trainer.rows_logprobs(adapters, [g.prompt_ids for g in gens], [g.completion_ids for g in gens])
    for row, g in enumerate(gens):
        assert g.logprobs is not None and len(g.logprobs) == len(g.completion_ids) == int(mask[row].sum())
        diff = (lp[row, :len(g.logprobs)] - torch.tensor(g.logprobs)).abs().max().item()
        assert diff < 1e-4, (row, adapters[row], diff)
    gen, has = rollout_correction.generator_logp([g.logprobs for g in gens], lp.shape[1], lp.device)
    c = rollout_correction.correct(lp, gen, has, mask, "none", 2.0)
    k3 = float(c.rows.k3.sum() / c.rows.tokens.sum())
    assert abs(k3) < 1e-6 < monitors.OUT_OF_SYNC_K3


def test_rollouts_of_one_prompt_are_distinct_and_reproducible_from_the_seed(pair):
    backend, _ = pair
    rows = prompts(backend, QUESTIONS[:1]) * 4

    def sample(seed):
        return [g.completion_ids for g in backend.generate(rows, ["A"] * 4, 16, temperature=1.0, seed=seed)]

    first = sample(5)
    assert len({tuple(c) for c in first}) >= 2, "a task's rollouts came out identical"
    assert sample(5) == first and sample(6) != first


def test_an_update_reaches_the_engine_under_a_fresh_id(pair):
    backend, trainer = pair
    rows = prompts(backend)
    before, old_id = greedy(backend, rows, ["A", "A"]), backend.requests["A"].lora_int_id
    backend.set_adapter_state("A", perturbed(backend.adapter_state("A"), seed=99))
    after = greedy(backend, rows, ["A", "A"])
    assert after == greedy(trainer, rows, ["A", "A"]) and after != before
    assert backend.requests["A"].lora_int_id != old_id
    assert old_id not in backend.engine.llm_engine.list_loras()  # dropped before the new id loaded


def test_an_evolutions_child_is_served_beside_a_full_population_and_base_rows(pair):
    """Three members and base rows in one batch, after re-syncs: the slot a base row reads on vLLM's CPU
    LoRA path (the last, vllm PR 48421) must still be empty."""
    backend, trainer = pair
    child = operators.crossover_swap(backend.adapter_state("A"), backend.adapter_state("B"),
                                     torch.Generator().manual_seed(3))
    child = operators.mutate(child, 0.02, torch.Generator().manual_seed(4))
    backend.add_adapter("C", seed=7)
    backend.set_adapter_state("C", child)
    rows = prompts(backend) * 4
    adapters = ["C", "C", "A", "A", "B", "B", None, None]
    got = greedy(backend, rows, adapters)
    assert got == greedy(trainer, rows, adapters)
    assert got[0] != got[6] or got[1] != got[7]


def test_remove_adapter(pair):
    backend, trainer = pair
    rows = prompts(backend)
    greedy(backend, rows, ["C", None])
    gone = backend.requests["C"].lora_int_id
    backend.remove_adapter("C")
    assert "C" not in backend.adapters and "C" not in backend.requests
    got = greedy(backend, rows, ["A", None])
    assert got == greedy(trainer, rows, ["A", None])
    assert gone not in backend.engine.llm_engine.list_loras()
    with pytest.raises(KeyError):
        backend.generate(rows[:1], ["C"], 4, seed=0)


def test_a_prompt_over_max_model_len_is_refused_alone(pair, caplog):
    backend, trainer = pair
    short = prompts(backend)[0]
    long = backend.encode_chat([{"role": "user", "content": " ".join(["word"] * MAX_LEN)}])
    with caplog.at_level(logging.WARNING):
        gens = backend.generate([short, long, short], ["A", None, "B"], 8, temperature=0.0, seed=0)
    assert gens[1].completion_ids == [] and len(gens[1].prompt_ids) >= MAX_LEN
    assert [gens[0].completion_ids, gens[2].completion_ids] == greedy(trainer, [short, short], ["A", "B"], 8)
    assert "model.max_model_len" in caplog.text


def test_stops_at_the_end_of_a_turn_and_at_a_stop_string_kept_in_the_output(pair):
    backend, trainer = pair
    rows = prompts(backend, ("Say hello.",))
    stops = chat_template.stop_token_ids(trainer.tokenizer)
    end_of_turn = chat_template.end_of_turn_id(trainer.tokenizer)
    assert end_of_turn in stops and trainer.tokenizer.eos_token_id in stops
    (turn,) = greedy(backend, rows, [None], tokens=64)
    assert turn[-1] == end_of_turn and end_of_turn not in turn[:-1], trainer.tokenizer.decode(turn)
    assert [turn] == greedy(trainer, rows, [None], tokens=64)
    # a stop string: the completion ends with it, token ids and text (the azr format's closing </answer>)
    word = trainer.tokenizer.decode(turn[1:2])
    gen = backend.generate(rows, [None], 64, temperature=0.0, seed=0, stop=(word,))[0]
    ref = trainer.generate(rows, [None], 64, temperature=0.0, seed=0, stop=(word,))[0]
    assert gen.text.endswith(word) and gen.completion_ids == ref.completion_ids == turn[:2], (gen.text, word)
