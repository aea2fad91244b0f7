"""``evaluation/harness/batching.py``: several targets' generate calls merge into one mixed-adapter backend call."""

import threading

from populora.evaluation.harness.batching import SharedBackend


class _Gen:
    def __init__(self, text):
        self.text = text


class _RecordingBackend:
    """Answers ``prompt@adapter`` per row and records every call."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, adapters, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, stop=(), batch_size=16):
        self.calls.append((list(prompts), list(adapters), seed, batch_size))
        if "boom" in prompts:
            raise ValueError("boom")
        return [_Gen(f"{p}@{a}") for p, a in zip(prompts, adapters)]

    def encode_chat(self, messages, prefill=""):
        return messages[0]["content"] + prefill


def _run_parties(shared, work):
    out, errors = {}, {}

    def one(i):
        try:
            out[i] = work(i, shared.party(i))
        except Exception as e:  # noqa: BLE001
            errors[i] = e
        finally:
            shared.leave()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(shared.live)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a party is stuck"
    return out, errors


def test_parties_share_one_call_per_chunk_and_get_their_own_rows():
    backend = _RecordingBackend()
    adapters = ["a", "b", None]

    def work(i, party):
        texts = []
        for chunk, seed in ((["p1", "p2"], 0), (["p3"], 2)):
            texts += [g.text for g in party.generate(chunk, [adapters[i]] * len(chunk), 8, temperature=0.0, seed=seed,
                                                     batch_size=2)]
        return texts, party.encode_chat([{"role": "user", "content": "hi"}])

    out, errors = _run_parties(SharedBackend(backend, 3), work)
    assert not errors
    for i, a in enumerate(adapters):
        assert out[i] == ([f"p1@{a}", f"p2@{a}", f"p3@{a}"], "hi")
    # two chunks -> two backend calls, each with every party's rows in party order
    assert [c[0] for c in backend.calls] == [["p1", "p2"] * 3, ["p3"] * 3]
    assert backend.calls[0][1] == ["a", "a", "b", "b", None, None]
    assert [c[3] for c in backend.calls] == [6, 3]  # one batch per merged call


def test_different_settings_never_share_a_batch_and_a_finished_party_is_not_awaited():
    backend = _RecordingBackend()

    def work(i, party):
        if i == 2:
            return []  # finished without generating: the others must not wait for it
        return [g.text for g in party.generate(["p"], [str(i)], 8, seed=i, batch_size=4)]

    out, errors = _run_parties(SharedBackend(backend, 3), work)
    assert not errors and out[0] == ["p@0"] and out[1] == ["p@1"]
    assert sorted(c[1] for c in backend.calls) == [["0"], ["1"]]


def test_a_backend_error_reaches_every_party_of_that_batch():
    shared = SharedBackend(_RecordingBackend(), 2)
    out, errors = _run_parties(shared, lambda i, party: party.generate(["boom"], [None], 8, batch_size=1))
    assert set(errors) == {0, 1} and all(isinstance(e, ValueError) for e in errors.values())


def test_cancel_ends_every_party_at_its_next_generate():
    """A stop reaches only the thread that joins the parties: ``cancel`` makes the waiting parties and every
    later ``generate`` raise, so an evaluation's threads end after the batch in flight, not after all of it."""
    from populora.evaluation.harness.batching import Stopped

    backend = _RecordingBackend()
    shared = SharedBackend(backend, 2)
    waiting = threading.Event()
    got = {}

    def first():  # waits for the second party, which never comes: only cancel frees it
        try:
            waiting.set()
            shared.party(0).generate(["p"], ["a"], 8, temperature=0.0, batch_size=1)
        except Stopped as e:
            got["first"] = e

    th = threading.Thread(target=first)
    th.start()
    waiting.wait(5)
    while not shared.pending:
        pass
    shared.cancel(Stopped("evaluation stopped"))
    th.join(timeout=10)
    assert not th.is_alive() and str(got["first"]) == "evaluation stopped"
    try:
        shared.party(1).generate(["q"], ["b"], 8, temperature=0.0, batch_size=1)
    except Stopped:
        pass
    else:
        raise AssertionError("a generate after cancel ran")
    assert backend.calls == []  # nothing was generated after the stop
