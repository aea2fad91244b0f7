"""The PEFT backend: one frozen base, many named LoRA adapters in a PEFT ``PeftModel`` (the reference).

Every row of a generation batch can use a different adapter (PEFT's ``adapter_names=``, which needs eval mode,
so the model stays in eval mode throughout; LoRA dropout is applied by us never, gradients flow in eval mode all
the same). Training runs one forward per adapter; the batched multi-LoRA backend is checked against this one.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import torch

from populora.platform.backends import generation, logprobs, rollout_correction
from populora.platform.backends.base import BASE, Generation, LoraSpec, TrainSample
from populora.platform.backends.optimizer import AdamConfig, make_optimizer
from populora.platform.backends.peft_dir import lora_config
from populora.platform.backends.policy_loss import Tally, UpdateSpec, mini_batches, pad_rows, row_terms


class PeftBackend:
    """A PEFT ``PeftModel`` holding one LoRA adapter per population member."""

    def __init__(self, base_model, tokenizer, lora: LoraSpec):
        self.base_model = base_model
        self.tokenizer = tokenizer
        self.lora = lora
        self.model = None  # the PeftModel, created with the first adapter
        self.device = next(base_model.parameters()).device
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        # Looked up once per adapter set, not per forward: PEFT's own ``set_adapter`` and ``disable_adapter`` walk
        # every module (and ``disable_adapter`` builds the whole model status), which cost more than the tiny
        # planted base's forward itself and a fixed share of a real one's (``_forward``).
        self._params: dict[str, list[torch.nn.Parameter]] = {}
        self._lora_layers: list | None = None

    # ------------------------------------------------------------------ adapters
    @property
    def adapters(self) -> list[str]:
        return [] if self.model is None else [n for n in self.model.peft_config if n != "__placeholder__"]

    def add_adapter(self, name: str, from_dir: str | Path | None = None, seed: int | None = None) -> None:
        """Create a fresh adapter (PEFT init: A random, B zero; ``seed`` fixes A) or load one from a PEFT dir."""
        from peft import PeftModel, get_peft_model

        if seed is not None:
            torch.manual_seed(seed)
        if self.model is None:
            if from_dir is not None:
                self.model = PeftModel.from_pretrained(self.base_model, str(from_dir), adapter_name=name, is_trainable=True)
            else:
                self.model = get_peft_model(self.base_model, lora_config(self.lora), adapter_name=name)
        elif from_dir is not None:
            self.model.load_adapter(str(from_dir), adapter_name=name, is_trainable=True)
        else:
            self.model.add_adapter(name, lora_config(self.lora))
        self.model.eval()
        self._forget_layout()
        for p in self.parameters(name):
            p.requires_grad_(True)

    def remove_adapter(self, name: str) -> None:
        self.optimizers.pop(name, None)
        self._forget_layout()
        if self.adapters == [name]:  # PEFT cannot hold zero adapters: go back to the bare base model
            self.base_model = self.model.unload()
            self.model = None
            return
        self.model.delete_adapter(name)

    def parameters(self, name: str) -> list[torch.nn.Parameter]:
        if name not in self._params:
            marker = f".{name}."
            self._params[name] = [p for key, p in self.model.named_parameters() if "lora_" in key and marker in key]
        return self._params[name]

    def to(self, device) -> "PeftBackend":
        """The model and its adapters on ``device``: a move makes new parameter objects (a meta or another device),
        so the cached parameter lists are dropped too."""
        self.model.to(device)
        self._forget_layout()
        return self

    def _forget_layout(self) -> None:
        """Adapters added or removed: the cached parameter lists and LoRA layers are stale."""
        self._params.clear()
        self._lora_layers = None

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        """LoRA tensors of one adapter, keyed by module path + 'lora_A' / 'lora_B' (adapter name removed)."""
        marker = f".{name}."
        return {
            key.replace(marker, "."): p.detach().clone()
            for key, p in self.model.named_parameters()
            if "lora_" in key and marker in key
        }

    def set_adapter_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        marker = f".{name}."
        params = {key.replace(marker, "."): p for key, p in self.model.named_parameters() if "lora_" in key and marker in key}
        missing = set(params) ^ set(state)
        if missing:
            raise ValueError(f"adapter state for {name!r} does not match the model's LoRA layout: {sorted(missing)[:4]}")
        with torch.no_grad():
            for key, p in params.items():
                if p.shape != state[key].shape:
                    raise ValueError(f"{key}: shape {tuple(state[key].shape)} != {tuple(p.shape)} (ranks differ?)")
                p.copy_(state[key])

    def save_adapter(self, name: str, directory: str | Path) -> Path:
        """Write a standard PEFT adapter dir (adapter_config.json + adapter_model.safetensors)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory.parent / f".{directory.name}.saving"
        try:
            self.model.save_pretrained(str(tmp), selected_adapters=[name])
            # PEFT writes non-default adapters into a sub-folder named after them.
            src = tmp / name if (tmp / name).is_dir() else tmp
            for f in src.iterdir():
                if f.is_file():
                    f.replace(directory / f.name)
        finally:  # also when the disk is full: no half-written copy left taking space
            shutil.rmtree(tmp, ignore_errors=True)
        return directory

    # ------------------------------------------------------------------ generation
    def encode_chat(self, messages: list[dict], prefill: str = "") -> str:
        return generation.encode_chat(self.tokenizer, messages, prefill)

    def generate(self, prompts: list[str], adapters: list[str | None], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, stop: tuple[str, ...] = (),
                 batch_size: int = 16) -> list[Generation]:
        """Sample one completion per prompt, row i with adapter ``adapters[i]`` (None = bare base)."""
        return generation.generate(self.tokenizer, self.device, self._run_generate, prompts, adapters, max_new_tokens,
                                   temperature, top_p, seed, stop, batch_size)

    # ------------------------------------------------------------------ training
    def init_optimizer(self, name: str, optim: AdamConfig) -> None:
        """A fresh AdamW for one adapter (new members and evolved children start with no moments)."""
        self.optimizers[name] = make_optimizer(self.parameters(name), optim)

    def optimizer_state(self, name: str) -> dict:
        return self.optimizers[name].state_dict()

    def load_optimizer_state(self, name: str, state: dict) -> None:
        self.optimizers[name].load_state_dict(state)

    def train_step(self, batches: dict[str, list[TrainSample]], micro_batch: int = 4, max_len: int = 1024,
                   grad_clip: float = 1.0, kl_coef: float = 0.0, log_kl: bool = True, **clipped) -> dict[str, dict]:
        """The clipped policy-gradient step (policy_loss.py) per adapter on its own samples (one adapter per forward).

        ``clipped``: the other fields of ``UpdateSpec`` (``temperature``, ``mini_batch_size``, ``loss_agg``, ...).
        """
        spec = UpdateSpec(micro_batch, max_len, grad_clip, kl_coef, log_kl, **clipped)
        return {name: self._adapter_step(name, samples, spec) for name, samples in batches.items() if samples}

    def _adapter_step(self, name: str, samples: list[TrainSample], spec: UpdateSpec) -> dict:
        layout = mini_batches(samples, spec)
        old = self._old_logprobs(name, samples, [i for mb in layout[1:] for i in mb.rows], spec)
        tally = Tally(sum(len(s.completion_ids) for s in samples), len(samples), spec.needs_base)
        optimizer = self.optimizers[name]
        for j, mb in enumerate(layout):
            tally.start(mb.rollouts, mb.tokens)
            optimizer.zero_grad(set_to_none=True)
            for k in range(0, len(mb.rows), spec.micro_batch):
                idx = mb.rows[k:k + spec.micro_batch]
                chunk = [samples[i] for i in idx]
                prompts, completions = [s.prompt_ids for s in chunk], [s.completion_ids for s in chunk]
                logp, ent, mask = self._token_stats(name, prompts, completions, spec)                   # (B, T) each
                old_logp = logp.detach() if j == 0 else pad_rows([old[i] for i in idx], logp.shape[1], logp.device)
                base_logp = None
                if spec.needs_base:
                    with torch.no_grad():
                        base_logp, _ = self.sequence_logprobs(BASE, prompts, completions, spec.max_len, spec.temperature)
                adv = torch.tensor([s.weight for s in chunk], device=logp.device)                       # (B,)
                denom = torch.tensor(mb.denoms[k:k + spec.micro_batch], device=logp.device)            # (B,)
                corr = rollout_correction.for_samples(chunk, old_logp, mask, spec.rollout_correction,
                                                      spec.rollout_correction_cap)
                terms = row_terms(logp, mask, old_logp, adv, denom, spec, ent, base_logp, corr.weights)
                terms.loss.sum().backward()
                for i in range(len(chunk)):
                    tally.add_row(terms, i)
                    tally.mismatch.add_row(corr.rows, i)
            tally.end(float(torch.nn.utils.clip_grad_norm_(self.parameters(name), spec.grad_clip)))
            optimizer.step()
        return tally.stats()

    def _old_logprobs(self, name: str, samples: list[TrainSample], indices: list[int], spec: UpdateSpec) -> dict[int, torch.Tensor]:
        """Log-probs of the sampling policy (the adapter before this step) for the rows of later mini-batches."""
        old = {}
        with torch.no_grad():
            for k in range(0, len(indices), spec.micro_batch):
                idx = indices[k:k + spec.micro_batch]
                logp, mask = self.sequence_logprobs(name, [samples[i].prompt_ids for i in idx],
                                                    [samples[i].completion_ids for i in idx], spec.max_len, spec.temperature)
                old.update({i: logp[r, :int(mask[r].sum())] for r, i in enumerate(idx)})
        return old

    def _token_stats(self, name, prompts, completions, spec: UpdateSpec):
        entropy = "grad" if spec.entropy_coef > 0 else "detached"
        return logprobs.token_stats(lambda ids, attn: self._forward(name, ids, attn), self._head(),
                                    self.tokenizer.pad_token_id, self.device, prompts, completions, spec.max_len, entropy,
                                    spec.temperature)

    def _run_generate(self, enc, adapters, kwargs):
        if self.model is None:
            return self.base_model.generate(**enc, **kwargs)
        names = ["__base__" if a is BASE else a for a in adapters]
        return self.model.generate(**enc, adapter_names=names, **kwargs)

    # ------------------------------------------------------------------ log-probs
    def sequence_logprobs(
        self, adapter: str | None, prompt_ids: list[list[int]], completion_ids: list[list[int]], max_len: int = 1024,
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of each completion given its prompt, of softmax(logits / temperature). Returns
        (logp, mask), both (B, T_completion).

        Gradients flow into ``adapter``'s LoRA weights when grad is enabled. ``adapter=None`` uses the bare base.
        """
        return logprobs.sequence_logprobs(lambda ids, attn: self._forward(adapter, ids, attn), self._head(),
                                          self.tokenizer.pad_token_id, self.device, prompt_ids, completion_ids, max_len,
                                          temperature)

    def probe_kl(self, p: str | None, q: str | None, prompt_ids: list[list[int]]) -> float:
        """Mean KL(p || q) of the next-token distributions over the prompts' positions (``logprobs.next_token_kl``)."""
        return logprobs.next_token_kl(lambda ids, attn: self._forward(p, ids, attn), lambda ids, attn: self._forward(q, ids, attn),
                                      self._head(), self.tokenizer.pad_token_id, self.device, prompt_ids)

    def _head(self):
        return logprobs.decoder_and_head(self.model or self.base_model)[1]

    def _forward(self, adapter, input_ids, attn):
        """The decoder's final hidden states (B, T, H) through ``adapter`` (logprobs.py applies the LM head to the
        positions it needs); PEFT's LoRA layers sit inside the decoder, so its adapter switches apply."""
        decoder = logprobs.decoder_and_head(self.model or self.base_model)[0]
        with self._active(adapter):
            return decoder(input_ids=input_ids, attention_mask=attn, use_cache=False).last_hidden_state

    @contextlib.contextmanager
    def _active(self, adapter):
        """``adapter`` active in every LoRA layer for one forward; ``BASE``: every LoRA layer off.

        PEFT's ``disable_adapter()`` context builds ``get_model_status()`` (a walk of all modules per LoRA layer)
        on each entry, and ``set_adapter`` walks every module: ~5 ms per forward on the planted base, more than
        the forward. Here each LoRA layer's own switch (``enable_adapters``) is flipped, and the active adapter
        set only when it changes."""
        if self.model is None:
            yield
            return
        if adapter is BASE:
            if self._lora_layers is None:
                from peft.tuners.tuners_utils import BaseTunerLayer

                self._lora_layers = [m for m in self.model.modules() if isinstance(m, BaseTunerLayer)]
            for layer in self._lora_layers:
                layer.enable_adapters(False)
            try:
                yield
            finally:
                for layer in self._lora_layers:
                    layer.enable_adapters(True)  # re-activates the active adapter, grads as set_adapter sets them
            return
        if self.model.active_adapter != adapter:
            self.model.set_adapter(adapter)
        for p in self.parameters(adapter):  # set_adapter and enable_adapters may freeze; the active adapter must train
            p.requires_grad_(True)
        yield
