"""The platform every layer above stands on (evaluation, training, the UI and the CLI import it; it imports none
of them): config loading and presets (``config``), the memory and compute plan (``plan``), disk space, files,
progress, threads and Ray settings here, and one sub-package per system:

- ``jobs/``: the job system (launch, queue, supervisor, stops, restarts, heartbeats, the reaper, Ray Jobs);
- ``store/``: the MLflow store and the run layout, families, ancestry, sweeps' records;
- ``model/``: the frozen base model, its tokenizer's template, the LoRA shape, the build cache;
- ``backends/``: generation, log-probs and updates of many LoRA adapters on one base (PEFT, multi-LoRA, vLLM, Ray);
- ``sandbox/``: running untrusted programs, and the verifier of proposed tasks.

Named ``populora.platform`` (never a top-level ``platform`` package, which would shadow Python's own
``platform`` module and break torch's import).
"""
