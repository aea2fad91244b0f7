"""Export the adapters worth keeping (``populora export --run ID --member M --out DIR [--merge] [--register NAME]``).

Default: the member's adapter as a standard PEFT dir (adapter_config.json + adapter_model.safetensors), which
``PeftModel.from_pretrained`` and vLLM's LoRA loader (``LoRARequest(name, id, DIR)``) read as they are.
``--merge``: the adapter folded into the frozen base (``merge_and_unload``), saved as a plain HF model dir with
its tokenizer. Either way ``populora_export.json`` records where it came from: run, member, base model, the
member's lineage (its ancestors back to the initial population) and its evaluation scores, and ``ancestry.yaml``
the member's whole ancestry record (``populora.platform.store.ancestry``: every ancestor's operator, strength, ratings,
the settings of each run of a fork chain). ``--register`` logs
the dir to the member's MLflow run (artifact ``export/``) and registers it in the MLflow model registry, the
same metadata as tags of the model version.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import yaml

from populora.evaluation import targets as T
from populora.evaluation.config import run_model
from populora.platform.store import ancestry
from populora.platform.store import runlayout as rl
from populora.platform.config import ConfigError
from populora.platform.model.models import load_base, resolve_source
from populora.platform.store.tracking import Tracker

ANCESTRY_FILE = "ancestry.yaml"  # the member's ancestry record (populora.platform.store.ancestry), beside the adapter
EMBEDDED_HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the embedded GGUF's source model (for vLLM users)


class ExportError(ValueError):
    """Unknown run or member, or an output dir that is not empty."""


def lineage_of(events: list[dict], member: str) -> list[dict]:
    """The member's birth event and every ancestor's, child first (each event: child, parents, operator, ...).

    >>> ev = [{"child": "S0", "parents": []}, {"child": "S1", "parents": []}, {"child": "S2", "parents": ["S0", "S1"]}]
    >>> [e["child"] for e in lineage_of(ev, "S2")]
    ['S2', 'S0', 'S1']
    """
    by_child = {e["child"]: e for e in events}
    out, todo, seen = [], [member], set()
    while todo:
        m = todo.pop(0)
        if m in seen or m not in by_child:
            continue
        seen.add(m)
        out.append(by_child[m])
        todo += list(by_child[m].get("parents") or [])
    return out


def metadata(tracker, run_id: str, target, spec) -> dict:
    try:
        events = tracker.load_json(run_id, rl.LINEAGE).get("events", [])
    except Exception:  # noqa: BLE001 - a run without a lineage artifact (killed early): export anyway
        events = []
    member_run = tracker.get_run(target.mlflow_run)
    scores = {k: v for k, v in member_run.data.metrics.items() if k.startswith(rl.EVAL_PREFIX)}
    rating = {k: v for k, v in member_run.data.metrics.items() if k.startswith(rl.RATING_PREFIX)}
    return {"run": run_id, "member": target.label, "member_run": target.mlflow_run, "role": target.info.get("role"),
            "alive": target.info.get("alive"), "base_model": spec.base, "gguf_file": spec.gguf_file,
            "tiny_random": spec.tiny_random, "dtype": spec.dtype, "lineage": lineage_of(events, target.label),
            "scores": scores, "rating": rating}


def export_adapter(adapter_dir: str | Path, out: Path, spec) -> None:
    shutil.copytree(adapter_dir, out, dirs_exist_ok=True)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    if spec.base == "embedded":  # the training run's base path is a site-packages dir; name the public model
        cfg["base_model_name_or_path"] = EMBEDDED_HF_ID
    cfg["inference_mode"] = True
    cfg_path.write_text(json.dumps(cfg, indent=2))


def export_merged(adapter_dir: str | Path, out: Path, spec) -> None:
    """Base + adapter -> one HF model dir (dequantised from GGUF when the base is a GGUF file)."""
    from peft import PeftModel

    model, tok = load_base(resolve_source(spec.base, spec.gguf_file), spec.dtype, "cpu", spec.tiny_random)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(out))
    tok.save_pretrained(str(out))


def register(tracker, meta: dict, out: Path, name: str) -> str:
    """Log ``out`` on the member's run and register it as a new version of model ``name``; returns the version."""
    import mlflow

    tracker.log_dir(meta["member_run"], out, rl.EXPORT_FOLDER)
    flat = rl.registry_tags(meta["run"], meta["member"], meta["base_model"], [e["child"] for e in meta["lineage"]],
                            meta["scores"])
    client = tracker.client
    try:
        client.create_registered_model(name, description="PopuLoRA adapters exported with populora export")
    except mlflow.exceptions.MlflowException:
        pass  # it exists: add a version
    source = f"{tracker.get_run(meta['member_run']).info.artifact_uri}/{rl.EXPORT_FOLDER}"  # a plain dir, not an MLflow model
    mv = client.create_model_version(name, source, run_id=meta["member_run"], tags=flat,
                                     description=f"{meta['format']} of member {meta['member']} (run {meta['run']})")
    return str(mv.version)


def main(args) -> int:
    out = Path(args.out)
    try:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ExportError(f"{out} exists and is not empty; pick a new --out")
        tracker = Tracker()
        run = T.get_run(tracker, args.run)
        spec = run_model(args.run, run.data.tags.get(rl.RUN_DIR) or ".", tracker.uri)  # the base the run's own config names
        (target,) = T.member_targets(tracker, args.run, args.member)
    except (T.TargetError, ExportError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    (export_merged if args.merge else export_adapter)(target.adapter_dir, out, spec)
    meta = metadata(tracker, args.run, target, spec)
    meta["format"] = "merged HF model" if args.merge else "PEFT adapter"
    (out / "populora_export.json").write_text(json.dumps(meta, indent=1, default=str))
    # the member's whole ancestry (every ancestor up to the base, the settings of each run), beside the adapter
    try:
        record = ancestry.read(tracker.client, tracker.uri, args.run, args.member)
        (out / ANCESTRY_FILE).write_text(yaml.safe_dump(record, sort_keys=False))
    except KeyError as err:  # a run without lineage.json (an older store): the adapter is still worth exporting
        print(f"warning: no ancestry record: {err.args[0]}", file=sys.stderr)
    print(f"exported {args.member} of run {args.run} as a {meta['format']} to {out}")
    if args.register:
        version = register(tracker, meta, out, args.register)
        print(f"registered as MLflow model {args.register!r} version {version}")
    return 0
