"""``populora export``: a member's adapter as a PEFT dir that PEFT loads, merged into the base as a plain HF model
that gives the same logits, and registered in the MLflow model registry with its lineage."""

import json

import pytest
import torch
import yaml

from populora.cli import main


@pytest.fixture
def trained_run(mlflow_store, tmp_path):
    """The MLflow layout populora train leaves (parent run, a member child run, lineage.json), with a real adapter
    whose B is non-zero, so the member differs from the base."""
    from populora.platform import config as config_io
    from populora.platform.store import runlayout as rl
    from populora.platform.backends import LoraSpec, PeftBackend
    from populora.platform.model.models import load_base, resolve_source
    from populora.platform.store.tracking import Tracker
    from populora.training import TrainConfig

    model, tok = load_base(resolve_source("embedded"), tiny_random=True, device="cpu")
    backend = PeftBackend(model, tok, LoraSpec(rank=4))
    backend.add_adapter("S2", seed=1)
    g = torch.Generator().manual_seed(1)
    backend.set_adapter_state("S2", {k: torch.randn(v.shape, generator=g) * 0.5 for k, v in backend.adapter_state("S2").items()})
    adapter = backend.save_adapter("S2", tmp_path / "adapters" / "S2")
    # the run's own config names its base, as populora train writes it into the run dir
    (tmp_path / "config.yaml").write_text(config_io.dump(TrainConfig.model_validate({"model": {"tiny_random": True}})))
    tracker = Tracker()
    rid = tracker.start_run("export-test", "pop", tags={rl.KIND: rl.POPULATION, rl.RUN_DIR: str(tmp_path)})
    member = tracker.start_run("export-test", "S2", parent=rid, tags={
        rl.MEMBER_ID: "S2", rl.ROLE: "student", rl.ALIVE: "true", rl.ADAPTER_DIR: str(adapter)})
    tracker.log_metrics(member, {"eval/gsm8k/accuracy": 0.25}, 0)
    tracker.log_json(rid, {"events": [{"child": "S0", "parents": [], "operator": "init"},
                                      {"child": "S1", "parents": [], "operator": "init"},
                                      {"child": "S2", "parents": ["S0", "S1"], "operator": "crossover"}]}, rl.LINEAGE)
    return rid, member, tmp_path


def _logits(model, tok):
    ids = tok("def f(x): return x + 1", return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits


def test_export_peft_dir_loads_with_peft_and_merged_model_matches(trained_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from populora.platform.model.models import load_base, resolve_source

    rid, member_run, tmp = trained_run
    # the exports run in this process (they only make the dirs checked), as do the refusals of the next test (their
    # exit code and stderr, read with capsys)
    assert main(["export", "--run", rid, "--member", "S2", "--out", str(tmp / "peft"), "--register", "best-student"]) == 0
    meta = json.loads((tmp / "peft" / "populora_export.json").read_text())
    assert [e["child"] for e in meta["lineage"]] == ["S2", "S0", "S1"] and meta["scores"] == {"eval/gsm8k/accuracy": 0.25}
    record = yaml.safe_load((tmp / "peft" / "ancestry.yaml").read_text())  # the whole ancestry, beside the adapter
    assert [(a["member"], a["operator"], a["parents"]) for a in record["ancestors"]] == [
        ("S2", "crossover", ["S0", "S1"]), ("S0", "init", []), ("S1", "init", [])]
    assert record["ancestors"][0]["scores"] == {"eval/gsm8k/accuracy": 0.25} and [r["run"] for r in record["runs"]] == [rid]
    base, tok = load_base(resolve_source("embedded"), tiny_random=True, device="cpu")
    plain = _logits(base, tok)
    peft_model = PeftModel.from_pretrained(base, str(tmp / "peft"))
    adapted = _logits(peft_model, tok)
    assert not torch.allclose(adapted, plain, atol=1e-4)  # the adapter really changes the model

    assert main(["export", "--run", rid, "--member", "S2", "--out", str(tmp / "merged"), "--merge"]) == 0
    assert not (tmp / "merged" / "adapter_config.json").exists()
    hf = AutoModelForCausalLM.from_pretrained(str(tmp / "merged"))
    assert torch.allclose(_logits(hf, tok), adapted, atol=1e-4)

    from mlflow import MlflowClient

    from populora.platform.store import runlayout as rl

    client = MlflowClient()
    (version,) = client.search_model_versions("name='best-student'")
    assert version.run_id == member_run and version.tags[rl.REGISTRY_LINEAGE] == "S2 <- S0 <- S1"
    assert any(a.path == "export/adapter_config.json" for a in client.list_artifacts(member_run, "export"))


def test_export_refuses_unknown_member_and_non_empty_out(trained_run, capsys):
    rid, _, tmp = trained_run
    code = main(["export", "--run", rid, "--member", "T7", "--out", str(tmp / "x")])
    bad = capsys.readouterr().err
    assert code == 2 and "T7" in bad and "S2" in bad
    (tmp / "full").mkdir()
    (tmp / "full" / "f").write_text("x")
    code = main(["export", "--run", rid, "--member", "S2", "--out", str(tmp / "full")])
    assert code == 2 and "not empty" in capsys.readouterr().err
