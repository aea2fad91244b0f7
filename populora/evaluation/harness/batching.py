"""Population evaluation in one pass: every target's generation requests for a benchmark share mixed-adapter batches.

The benchmark suites stay as they are (one adapter, ``backend.generate`` per chunk of prompts). Each target runs
its suite in its own thread against a :class:`Party`, a view of the one shared backend; a party's ``generate``
waits until every target still running is waiting too, and then one ``backend.generate`` call serves them all,
row i with its own target's adapter (None = the bare base model). The backends take a per-row adapter list
already (the multi-LoRA slot router, PEFT's ``adapter_names``, vLLM's LoRARequest per row), so nothing below
changes.

Why the scores are the same as one target at a time: every target of a benchmark asks for the same prompts in the
same chunks, so a merged batch is the sequential chunk repeated once per target: the same padded width, the
same decoding settings, greedy decoding row by row. Requests only merge when every decoding setting (the seed
included) is the same. Sampling (temperature > 0) draws its noise for the whole batch, so a row's noise would
depend on its neighbours: the runner keeps sampled evaluations one target at a time.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field


@dataclass
class _Request:
    party: int
    prompts: list[str]
    adapters: list[str | None]
    key: tuple                       # every decoding setting: only equal keys share a batch
    batch_size: int
    done: bool = False
    result: list = field(default_factory=list)
    error: BaseException | None = None


class Stopped(RuntimeError):
    """The evaluation was stopped: what the other targets' threads raise at their next ``generate``."""


class SharedBackend:
    """One backend, ``parties`` threads: merges their ``generate`` calls once all live parties are waiting."""

    def __init__(self, backend, parties: int):
        self.backend = backend
        self.live = parties
        self.cond = threading.Condition()
        self.pending: list[_Request] = []
        self.calls = 0  # merged backend.generate calls (tests and benches check that merging happened)
        self.cancelled: BaseException | None = None

    def cancel(self, err: BaseException) -> None:
        """Stop every party at its next (or current, waiting) ``generate`` with ``err``: a stop of the evaluation
        ends its threads after the batch being generated, instead of letting them run every benchmark to the end.
        Waits for that batch (it holds the lock)."""
        with self.cond:
            self.cancelled = err
            for r in self.pending:
                r.error, r.done = err, True
            self.pending = []
            self.cond.notify_all()

    def party(self, index: int) -> "Party":
        return Party(self, index)

    def generate(self, req: _Request) -> list:
        with self.cond:
            if self.cancelled is not None:
                raise self.cancelled
            self.pending.append(req)
            self._flush_if_all_waiting()
            while not req.done:
                self.cond.wait()
        if req.error is not None:
            raise req.error
        return req.result

    def leave(self) -> None:
        """A party finished (or failed): the others no longer wait for it."""
        with self.cond:
            self.live -= 1
            self._flush_if_all_waiting()

    def call(self, fn, *args, **kwargs):
        """Anything else of the backend (chat template, tokenizer): one party at a time, as tokenizers are not
        safe to share between threads."""
        with self.cond:
            return fn(*args, **kwargs)

    def _flush_if_all_waiting(self) -> None:
        """Held lock. The other parties are all blocked in ``generate``, so the model runs here, undisturbed."""
        if not self.pending or len(self.pending) < self.live:
            return
        todo, self.pending = sorted(self.pending, key=lambda r: r.party), []
        groups: dict[tuple, list[_Request]] = {}
        for r in todo:
            groups.setdefault(r.key, []).append(r)
        for key, reqs in groups.items():
            max_new_tokens, temperature, top_p, seed, stop = key
            try:
                # one batch for the whole group: each request is at most one of its own batches
                outs = self.backend.generate([p for r in reqs for p in r.prompts], [a for r in reqs for a in r.adapters],
                                             max_new_tokens, temperature=temperature, top_p=top_p, seed=seed, stop=stop,
                                             batch_size=sum(max(len(r.prompts), 1) for r in reqs))
                self.calls += 1
                at = 0
                for r in reqs:
                    r.result, at = outs[at:at + len(r.prompts)], at + len(r.prompts)
            except BaseException as e:  # noqa: BLE001 - handed to every waiting party, each re-raises it
                for r in reqs:
                    r.error = e
            for r in reqs:
                r.done = True
        self.cond.notify_all()


class Party:
    """What one target's suite sees as its backend: ``generate`` goes through the shared batch, the rest is
    passed through (serialised)."""

    def __init__(self, shared: SharedBackend, index: int):
        self._shared, self._index = shared, index

    def generate(self, prompts: list[str], adapters: list[str | None], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, stop: tuple[str, ...] = (),
                 batch_size: int = 16) -> list:
        if len(prompts) > batch_size:  # several of its own batches: each merges with the other parties' in turn
            return [g for i in range(0, len(prompts), batch_size)
                    for g in self.generate(prompts[i:i + batch_size], adapters[i:i + batch_size], max_new_tokens,
                                           temperature, top_p, seed, stop, batch_size)]
        key = (max_new_tokens, temperature, top_p, seed, tuple(stop))
        return self._shared.generate(_Request(self._index, list(prompts), list(adapters), key, batch_size))

    def __getattr__(self, name: str):
        attr = getattr(self._shared.backend, name)
        if not inspect.ismethod(attr):  # data, and objects such as the tokenizer (callable, but not a method)
            return attr
        return lambda *args, **kwargs: self._shared.call(attr, *args, **kwargs)
