"""Batched multi-LoRA: the whole population's adapters in stacked tensors, one forward/backward for all.

Each target ``nn.Linear`` of the frozen base is wrapped by ``MultiLoraLinear``, which holds every member's A and B
stacked by slot, (S, r, in) and (S, out, r). Each row of a batch carries its member's slot; the LoRA delta of
all rows is one gather + two batched matmuls:

    y = W x + scale * B[slot] (A[slot] x)

so a mixed batch of 8 members costs about what a single-adapter batch costs, and one backward pass sends each
member's gradient to its own slot only. Slot 0 is the bare base (zeros, never trained).

Its optimizer is ``SlotAdam`` (optimizer.py): AdamW with per-slot moments and step counts, so a member that gets no
rollouts in a step does not move, and an evolved child starts fresh. ``MultiLoraBackend`` implements the ``Backend`` protocol and imports/exports standard PEFT adapter dirs. Its
``update`` is the one mini-batch update loop: ``train_step`` runs it in one process, and each data-parallel worker
(data_parallel.py, shard_update.py) runs it on its rows with an all-reduce of the gradients before every step.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from populora.platform.backends import checkpointing, generation, logprobs, rollout_correction
from populora.platform.backends.base import BASE, Generation, LoraSpec, TrainSample
from populora.platform.backends.optimizer import AdamConfig, SlotAdam, make_optimizer
from populora.platform.backends.peft_dir import read_peft_dir, write_peft_dir
from populora.platform.backends.policy_loss import MiniBatch, Tally, UpdateSpec, mini_batches, pad_rows, row_terms

GATHER_CACHE_BYTES = 512 * 2**20  # the most one generate call keeps of its rows' gathered LoRA weights
AllReduce = Callable[[torch.Tensor], None]  # sums a flat tensor over the data-parallel workers, in place


class SlotRouter:
    """Shared by every wrapped layer: the slot of each batch row for the forward pass in progress."""

    def __init__(self):
        self.index: torch.Tensor | None = None  # (B,) long
        # During a generate call the slots and the weights stay fixed while every layer runs once per new token:
        # each layer's rows' (A, B), gathered once, are kept here (layer -> (a, b)) and dropped when it ends, up to
        # GATHER_CACHE_BYTES in all (past it, layers gather per forward as outside generation).
        self.gathered: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] | None = None
        self.gathered_bytes = 0

    @contextlib.contextmanager
    def generating(self, index: torch.Tensor):
        """The rows' slots for one generate call, with the per-call gather cache."""
        self.index, self.gathered, self.gathered_bytes = index, {}, 0
        try:
            yield
        finally:
            self.index, self.gathered = None, None

    def capture(self) -> torch.Tensor | None:
        return self.index

    @contextlib.contextmanager
    def restored(self, index: torch.Tensor | None):
        """The rows' slots as they were when a checkpointed layer ran forward, for its recomputation."""
        current, self.index = self.index, index
        try:
            yield
        finally:
            self.index = current


class MultiLoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, slots: int, rank: int, scale: float, router: SlotRouter):
        super().__init__()
        self.base, self.scale, self.router = base, scale, router
        device = base.weight.device  # LoRA weights stay fp32 whatever the base dtype, as PEFT trains them
        self.lora_A = nn.Parameter(torch.zeros(slots, rank, base.in_features, device=device))
        self.lora_B = nn.Parameter(torch.zeros(slots, base.out_features, rank, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, in)
        y = self.base(x)
        idx = self.router.index
        if idx is None:
            return y
        a, b = self._rows(idx)                                # (B, r, in), (B, out, r)
        h = torch.bmm(x.to(a.dtype), a.transpose(1, 2))       # (B, T, r)
        return y + self.scale * torch.bmm(h, b.transpose(1, 2)).to(y.dtype)

    def _rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's A and B; gathered once per generate call (the router's cache), else per forward."""
        router = self.router
        cache = router.gathered
        if cache is None or torch.is_grad_enabled():
            return self.lora_A[idx], self.lora_B[idx]
        rows = cache.get(self)
        if rows is None:
            rows = self.lora_A[idx], self.lora_B[idx]
            size = sum(t.numel() * t.element_size() for t in rows)
            if router.gathered_bytes + size <= GATHER_CACHE_BYTES:
                cache[self] = rows
                router.gathered_bytes += size
        return rows

    def grow(self, slots: int) -> None:
        """Make room for more slots (keeps existing weights; optimizer moments grow alongside)."""
        extra = slots - self.lora_A.shape[0]
        if extra <= 0:
            return
        with torch.no_grad():
            self.lora_A = nn.Parameter(torch.cat([self.lora_A, self.lora_A.new_zeros(extra, *self.lora_A.shape[1:])]))
            self.lora_B = nn.Parameter(torch.cat([self.lora_B, self.lora_B.new_zeros(extra, *self.lora_B.shape[1:])]))


class MultiLoraBackend:
    """The ``Backend`` protocol on batched multi-LoRA layers: one forward for a batch mixing any members."""

    def __init__(self, base_model, tokenizer, lora: LoraSpec, initial_slots: int = 8):
        self.base_model, self.tokenizer, self.lora = base_model, tokenizer, lora
        self.device = next(base_model.parameters()).device
        self.router = SlotRouter()
        checkpointing.register_state(base_model, self.router.capture, self.router.restored)  # used if enabled
        self.slots: dict[str, int] = {}
        self.layers: dict[str, MultiLoraLinear] = {}
        self.optimizer: SlotAdam | None = None
        self._decoder, self._head = logprobs.decoder_and_head(base_model)
        self._wrap(initial_slots + 1)  # + slot 0, the bare base

    # ------------------------------------------------------------------ layers
    def _wrap(self, slots: int) -> None:
        targets = set(self.lora.target_modules)
        scale = self.lora.alpha / self.lora.rank
        for name, module in list(self.base_model.named_modules()):
            leaf = name.rsplit(".", 1)[-1]
            if leaf in targets and isinstance(module, nn.Linear):
                parent = self.base_model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else self.base_model
                layer = MultiLoraLinear(module, slots, self.lora.rank, scale, self.router)
                setattr(parent, leaf, layer)
                self.layers[name] = layer
        if not self.layers:
            raise ValueError(f"no nn.Linear named {sorted(targets)} in the model; set model.target_modules")

    def unwrap(self) -> None:
        """Put the original linear layers back (tests reuse one base model)."""
        for name, layer in self.layers.items():
            parent = self.base_model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else self.base_model
            setattr(parent, name.rsplit(".", 1)[-1], layer.base)
        self.layers = {}

    def _params(self) -> list[nn.Parameter]:
        return [p for layer in self.layers.values() for p in (layer.lora_A, layer.lora_B)]

    def _key(self, name: str, which: str) -> str:
        return f"base_model.model.{name}.lora_{which}.weight"  # PEFT's key in adapter_model.safetensors

    # ------------------------------------------------------------------ adapters
    @property
    def adapters(self) -> list[str]:
        return list(self.slots)

    def add_adapter(self, name: str, from_dir: str | Path | None = None, seed: int | None = None) -> None:
        if name in self.slots:
            raise ValueError(f"adapter {name!r} already exists")
        used = set(self.slots.values())
        slot = next(i for i in range(1, len(used) + 2) if i not in used)
        capacity = next(iter(self.layers.values())).lora_A.shape[0]
        if slot >= capacity:
            for layer in self.layers.values():
                layer.grow(2 * capacity)
            if self.optimizer is not None:
                self.optimizer.rebind(self._params())
        self.slots[name] = slot
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        with torch.no_grad():
            for layer in self.layers.values():  # PEFT's init: A like nn.Linear, B zero
                # drawn on the CPU (a CPU generator cannot fill a CUDA tensor): the same adapter on every device
                a = torch.empty(layer.lora_A.shape[1:])
                nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=gen)
                layer.lora_A[slot].copy_(a)
                layer.lora_B[slot].zero_()
        if from_dir is not None:
            self.set_adapter_state(name, read_peft_dir(Path(from_dir), self.lora))

    def remove_adapter(self, name: str) -> None:
        slot = self.slots.pop(name)
        with torch.no_grad():
            for layer in self.layers.values():
                layer.lora_A[slot].zero_()
                layer.lora_B[slot].zero_()
        if self.optimizer is not None:
            self.optimizer.reset(slot)

    def parameters(self, name: str) -> list[torch.Tensor]:
        slot = self.slots[name]
        return [t[slot] for t in self._params()]

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        slot = self.slots[name]
        out = {}
        for lname, layer in self.layers.items():
            out[self._key(lname, "A")] = layer.lora_A[slot].detach().clone()
            out[self._key(lname, "B")] = layer.lora_B[slot].detach().clone()
        return out

    def set_adapter_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        slot = self.slots[name]
        expected = {self._key(n, w) for n in self.layers for w in "AB"}
        if set(state) != expected:
            raise ValueError(f"adapter state for {name!r} does not match the LoRA layout: {sorted(set(state) ^ expected)[:4]}")
        with torch.no_grad():
            for lname, layer in self.layers.items():
                for which, param in (("A", layer.lora_A), ("B", layer.lora_B)):
                    t = state[self._key(lname, which)]
                    if t.shape != param[slot].shape:
                        raise ValueError(f"{lname}.lora_{which}: shape {tuple(t.shape)} != {tuple(param[slot].shape)} (ranks differ?)")
                    param[slot].copy_(t)

    def save_adapter(self, name: str, directory: str | Path) -> Path:
        return write_peft_dir(self.adapter_state(name), self.lora, directory,
                              getattr(self.base_model.config, "_name_or_path", None))

    # ------------------------------------------------------------------ generation and log-probs
    def encode_chat(self, messages: list[dict], prefill: str = "") -> str:
        return generation.encode_chat(self.tokenizer, messages, prefill)

    def generate(self, prompts: list[str], adapters: list[str | None], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, stop: tuple[str, ...] = (),
                 batch_size: int = 16) -> list[Generation]:
        """One completion per prompt, row i with adapter ``adapters[i]``; a batch mixing members is one generate."""
        return generation.generate(self.tokenizer, self.device, self._run_generate, prompts, adapters, max_new_tokens,
                                   temperature, top_p, seed, stop, batch_size)

    def sequence_logprobs(self, adapter: str | None, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                          max_len: int = 1024, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rows_logprobs([adapter] * len(prompt_ids), prompt_ids, completion_ids, max_len, temperature)

    def rows_logprobs(self, adapters: list[str | None], prompt_ids: list[list[int]], completion_ids: list[list[int]],
                      max_len: int = 1024, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(logp, mask), both (B, T_completion), row i through adapter ``adapters[i]``: one forward for any mix."""
        return logprobs.sequence_logprobs(lambda ids, attn: self._forward_rows(adapters, ids, attn), self._head,
                                          self.tokenizer.pad_token_id, self.device, prompt_ids, completion_ids, max_len,
                                          temperature)

    def probe_kl(self, p: str | None, q: str | None, prompt_ids: list[list[int]]) -> float:
        """Mean KL(p || q) of the next-token distributions over the prompts' positions (``logprobs.next_token_kl``)."""
        n = len(prompt_ids)
        return logprobs.next_token_kl(lambda ids, attn: self._forward_rows([p] * n, ids, attn),
                                      lambda ids, attn: self._forward_rows([q] * n, ids, attn), self._head,
                                      self.tokenizer.pad_token_id, self.device, prompt_ids)

    def _slot_index(self, adapters: list[str | None]) -> torch.Tensor:
        return torch.tensor([0 if a is BASE else self.slots[a] for a in adapters], device=self.device)

    def _run_generate(self, enc, adapters, kwargs):
        with self.router.generating(self._slot_index(adapters)):
            return self.base_model.generate(**enc, **kwargs)

    def _forward_rows(self, adapters, input_ids, attn):
        """The decoder's final hidden states (B, T, H), row i through adapter ``adapters[i]`` (logprobs.py applies
        the LM head to the positions it needs)."""
        self.router.index = self._slot_index(adapters)
        try:
            return self._decoder(input_ids=input_ids, attention_mask=attn, use_cache=False).last_hidden_state
        finally:
            self.router.index = None

    # ------------------------------------------------------------------ training
    def init_optimizer(self, name: str, optim: AdamConfig) -> None:
        """Fresh moments for one adapter's slot; the first call builds the one ``SlotAdam`` of every slot (one
        run's adapters share their settings)."""
        if self.optimizer is None:
            self.optimizer = make_optimizer(self._params(), optim, stacked=True)
        self.optimizer.reset(self.slots[name])

    def optimizer_state(self, name: str) -> dict:
        return self.optimizer.slot_state(self.slots[name])

    def load_optimizer_state(self, name: str, state: dict) -> None:
        self.optimizer.load_slot_state(self.slots[name], state)

    def train_step(self, batches: dict[str, list[TrainSample]], micro_batch: int = 4, max_len: int = 1024,
                   grad_clip: float = 1.0, kl_coef: float = 0.0, log_kl: bool = True, **clipped) -> dict[str, dict]:
        """The clipped policy-gradient step (policy_loss.py) for every member at once, in one process (``update``
        with each member's own mini-batches and no all-reduce)."""
        spec = UpdateSpec(micro_batch, max_len, grad_clip, kl_coef, log_kl, **clipped)
        batches = {n: s for n, s in batches.items() if s}
        layout = {n: mini_batches(ss, spec) for n, ss in batches.items()}
        return {n: t.stats() for n, t in self.update(batches, layout, spec).items()}

    def update(self, batches: dict[str, list[TrainSample]], layout: dict[str, list[MiniBatch]], spec: UpdateSpec,
               all_reduce: AllReduce | None = None) -> dict[str, Tally]:
        """The one mini-batch update loop, of one process or of one data-parallel worker (shard_update.py): mini-batch
        j of every member is trained together, one forward/backward per micro-batch over rows of any members, then
        one clipped optimizer step for each member that has a j-th mini-batch. Each row's loss is normalised by its
        denominator over its member's whole mini-batch (``MiniBatch.denoms``, ``policy_loss.row_denominators``), so
        gradients and steps equal those of a separate per-member update (PEFT). ``all_reduce(flat)`` (in place, SUM),
        when given, sums the stepped slots' gradients over the workers before clipping. Returns the tallies (partial sums on a worker)."""
        old = self._old_logprobs(batches, [(n, i) for n, mbs in layout.items() for mb in mbs[1:] for i in mb.rows], spec)
        tallies = {n: Tally(sum(mb.tokens for mb in mbs), sum(mb.rollouts for mb in mbs), spec.needs_base)
                   for n, mbs in layout.items()}
        for j in range(max((len(mbs) for mbs in layout.values()), default=0)):
            members = [n for n in layout if j < len(layout[n])]
            denoms = {(n, i): d for n in members for i, d in zip(layout[n][j].rows, layout[n][j].denoms)}
            for n in members:
                tallies[n].start(layout[n][j].rollouts, layout[n][j].tokens)
            rows = sorted(((n, i) for n in members for i in layout[n][j].rows), key=lambda r: _length(batches[r[0]][r[1]]))
            params = self._params()
            for p in params:
                p.grad = None
            for k in range(0, len(rows), spec.micro_batch):
                self._micro_step(rows[k:k + spec.micro_batch], batches, old if j else None, denoms, tallies, spec)
            slots = [self.slots[n] for n in members]
            if all_reduce is not None:
                _reduce_slot_grads(params, slots, all_reduce)
            norms = self.optimizer.clip_(slots, spec.grad_clip)
            self.optimizer.step(slots)
            for n in members:
                tallies[n].end(norms[self.slots[n]])
        return tallies

    def _micro_step(self, chunk, batches, old, denoms, tallies, spec: UpdateSpec) -> None:
        """Forward/backward of one micro-batch of (member, row index) pairs; ``old`` None = first mini-batch."""
        names = [n for n, _ in chunk]
        samples = [batches[n][i] for n, i in chunk]
        prompts, completions = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
        entropy = "grad" if spec.entropy_coef > 0 else "detached"
        logp, ent, mask = logprobs.token_stats(lambda ids, attn: self._forward_rows(names, ids, attn), self._head,
                                               self.tokenizer.pad_token_id, self.device, prompts, completions, spec.max_len,
                                               entropy, spec.temperature)  # (B, T) each
        old_logp = logp.detach() if old is None else pad_rows([old[r] for r in chunk], logp.shape[1], logp.device)
        base_logp = None
        if spec.needs_base:
            with torch.no_grad():
                base_logp, _ = self.sequence_logprobs(BASE, prompts, completions, spec.max_len, spec.temperature)
        adv = torch.tensor([s.weight for s in samples], device=logp.device)                  # (B,)
        denom = torch.tensor([denoms[r] for r in chunk], device=logp.device)                 # (B,)
        corr = rollout_correction.for_samples(samples, old_logp, mask, spec.rollout_correction, spec.rollout_correction_cap)
        terms = row_terms(logp, mask, old_logp, adv, denom, spec, ent, base_logp, corr.weights)
        terms.loss.sum().backward()
        for i, n in enumerate(names):
            tallies[n].add_row(terms, i)
            tallies[n].mismatch.add_row(corr.rows, i)

    def _old_logprobs(self, batches, rows: list[tuple[str, int]], spec: UpdateSpec) -> dict[tuple[str, int], torch.Tensor]:
        """Log-probs of the sampling policies (every member before this step) for the rows of later mini-batches."""
        old = {}
        with torch.no_grad():
            for k in range(0, len(rows), spec.micro_batch):
                chunk = rows[k:k + spec.micro_batch]
                samples = [batches[n][i] for n, i in chunk]
                logp, mask = self.rows_logprobs([n for n, _ in chunk], [s.prompt_ids for s in samples],
                                                [s.completion_ids for s in samples], spec.max_len, spec.temperature)
                old.update({r: logp[b, :int(mask[b].sum())] for b, r in enumerate(chunk)})
        return old


def _length(sample: TrainSample) -> int:
    return len(sample.prompt_ids) + len(sample.completion_ids)


def _reduce_slot_grads(params: list[torch.Tensor], slots: list[int], all_reduce: AllReduce) -> None:
    """Sum the members' slot gradients over workers in one collective: a worker that had no rows (no backward)
    sends zeros. Only the stepped slots travel (the population's other adapters have no gradient here)."""
    index = torch.tensor(slots, device=params[0].device)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.index_select(0, index).flatten() for p in params])
    all_reduce(flat)
    start = 0
    for p in params:
        size = p.grad[0].numel() * len(slots)
        p.grad.index_copy_(0, index, flat[start:start + size].view(len(slots), *p.grad.shape[1:]))
        start += size
