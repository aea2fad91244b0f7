"""AppTest tests of every UI page against an MLflow store produced by a real short run (plus a baseline run)."""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path

import pytest
from conftest import trained_runs
from mlflow import MlflowClient

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from populora.platform.store import runlayout

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ROOT / "populora" / "ui" / "views"
TINY = ["--set", "model.tiny_random=true", "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8",
        "--set", "tasks.tasks_per_teacher=2", "--quiet"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    """{"uri", "population", "baseline", "real"}: a real 3-step population run (evolving every step) and a
    2-step baseline run, trained once for the module."""
    tmp = tmp_path_factory.mktemp("ui_store")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    if importlib.util.find_spec("populora.platform.sandbox.verifier") is None:
        warnings.warn("populora.platform.sandbox.verifier is missing: UI tests run on the synthetic store", stacklevel=1)
        import synthetic_store

        ids = synthetic_store.build(uri, runs=2, members=4, tasks=24, steps=3)
        return {"uri": uri, "population": ids[1], "baseline": ids[0], "real": False, "dir": tmp}
    # in this process: the pages, not the trainer's process, are under test here
    (baseline,) = trained_runs(tmp, uri, "--config", str(ROOT / "configs/baseline.yaml"), "--set", "steps=2", *TINY)
    (population,) = trained_runs(tmp, uri, "--config", str(ROOT / "configs/smoke.yaml"), "--set", "steps=3",
                                     "--set", "evolution.every=1", "--set", f"baseline_run={baseline}", *TINY)
    return {"uri": uri, "population": population, "baseline": baseline, "real": True, "dir": tmp}


@pytest.fixture()
def app(store, monkeypatch, tmp_path):
    """A page runner bound to the store; each page starts from a fresh cache so stores never leak between tests."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))

    def run(page: str, **query) -> AppTest:
        import streamlit as st

        st.cache_data.clear()
        at = AppTest.from_file(str(VIEWS / f"{page}.py"), default_timeout=60)
        for k, v in query.items():
            at.query_params[k] = v
        return at.run()

    return run


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    parts = [e.value for kind in ("markdown", "caption", "info", "error", "warning", "subheader", "title") for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


# ====================================================================== empty store
@pytest.mark.parametrize("page", ["runs", "arms_race", "lineage", "tasks", "compare", "launch"])
def test_every_page_on_an_empty_store(page, monkeypatch, tmp_path):
    import streamlit as st

    st.cache_data.clear()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'empty.db'}")
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    at = _ok(AppTest.from_file(str(VIEWS / f"{page}.py"), default_timeout=60).run())
    if page != "launch":
        assert "No PopuLoRA" in texts(at)


# ====================================================================== pages on the real run
def test_runs_lists_population_and_baseline(app, store):
    at = _ok(app("runs"))
    table = at.dataframe[0].value
    assert {store["population"], store["baseline"]} <= set(table["run_id"])
    assert set(table["kind"]) >= {"population", "baseline"}
    at = _ok(app("runs", run=store["population"]))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["progress"] == "3/3" and "finished" in metrics["status"]


def test_arms_race_charts_population_vs_baseline(app, store):
    at = _ok(app("arms_race", run=store["population"]))
    assert at.selectbox(key="ar_baseline").value == store["baseline"]  # picked from the populora.baseline_run tag
    subheaders = [s.value for s in at.subheader]
    assert "Population vs baseline" in subheaders and "Per member" in subheaders
    # 4 headline + 6 curriculum + ratings + member metric; a tiny random model proposes few valid tasks, so some
    # series (solve rate, complexity of valid tasks) may be empty: those say why instead of a chart (a finished
    # run: never logged; a live one: no data yet)
    charts = len(at.get("vega_lite_chart"))
    empty = sum(any(w in c.value for w in ("no data yet", "never logged", "not logged", "no valid task")) for c in at.caption)
    assert charts >= 4 and charts + empty >= 12, (charts, empty)


def test_runs_and_arms_race_show_the_last_steps_learning_diagnostics(app, store):
    """The learn/ line under the flags (training/measures/learning.py's metrics as logged): flat groups at least,
    on the run's page and on Arms race, whose toggle draws their curves; torch generation logs no mismatch."""
    if not store["real"]:
        pytest.skip("the synthetic store's records have no trained rollouts")
    line = next((c.value for c in _ok(app("runs", run=store["population"])).caption if "learning, last step" in c.value), "")
    assert "flat groups" in line and "k3" not in line, line
    at = _ok(app("arms_race", run=store["population"]))
    assert any("learning, last step" in c.value for c in at.caption)
    charts = len(at.get("vega_lite_chart"))
    at = _ok(at.toggle(key="ar_learning").set_value(True).run())
    assert len(at.get("vega_lite_chart")) > charts


def test_arms_race_reads_the_curves_against_per_adapter_compute(app, store):
    """The x-axis switch: the headline curves against each run's per-adapter ledger (generated + trained tokens
    so far), so the arms are read at equal spend; the steps stay the default."""
    import json

    at = _ok(app("arms_race", run=store["population"]))
    def x_axes(at):  # the x encoding of every line chart (a rating band's layers have their own)
        specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
        return [s["encoding"]["x"] for s in specs if "encoding" in s]

    assert x_axes(at) and all(x["field"] == "step" for x in x_axes(at))
    at.radio(key="ar_x").set_value("per-adapter compute (generated + trained tokens)").run()
    compute = [x for x in x_axes(_ok(at)) if x["field"] == "compute"]
    assert len(compute) >= 2 and compute[0]["title"] == "per-adapter compute (generated + trained tokens)"


def test_lineage_draws_every_member_and_selects_one(app, store):
    at = _ok(app("lineage", run=store["population"]))
    dot = at.get("graphviz_chart")[0].proto.spec
    members = at.selectbox(key="lin_member").options
    assert all(f'"{m}"' in dot for m in members)
    if store["real"]:  # evolution every step for 3 steps: replaced members and children with parents
        assert "->" in dot and len(members) > 4
        # the per-operator table: one row per operator the edges name (evolution/<operator>/* on the parent run)
        from populora.training.evolve.operators import FAMILY
        named = {op for op in FAMILY if f'label="{op} @' in dot}
        assert named and set(at.dataframe[-1].value["operator"]) == named
    at.selectbox(key="lin_member").set_value(members[-1]).run()
    _ok(at)
    assert at.subheader[0].value == f"Member {members[-1]}"
    assert any(m.label == "generation" for m in at.metric)
    if store["real"]:  # its newest LoggedModel, named on the panel: the one the member run's tag names, its own
        rl, client = runlayout, MlflowClient(store["uri"])
        child = next(c for c in rl.member_runs(client, store["population"]) if c.data.tags[rl.MEMBER_ID] == members[-1])
        model_id = child.data.tags[rl.MODEL_ID]
        assert client.get_logged_model(model_id).tags[rl.REGISTRY_MEMBER] == members[-1]
        assert f"**newest model** (MLflow LoggedModel of its last checkpoint" in texts(at) and f"`{model_id}`" in texts(at)


def test_tasks_filters_and_shows_answers(app, store):
    at = _ok(app("tasks", run=store["population"]))
    assert at.expander, "a page of tasks"
    first = at.expander[0].label
    assert "step" in first and ("code_" in first)
    at.radio(key="tk_valid").set_value("invalid").run()
    _ok(at)
    assert all(e.label.startswith("❌") for e in at.expander)
    at.radio(key="tk_valid").set_value("valid").run()
    assert all(e.label.startswith("✅") for e in _ok(at).expander)


def test_compare_empty_benchmarks_and_training_table(app, store):
    at = _ok(app("compare", run=store["population"]))
    assert f"populora eval --run {store['population']}" in texts(at)
    table = at.dataframe[-1].value
    # ratings of two runs live on separate TrueSkill scales: the baseline's row, no difference with it
    assert "population mean" in table.index and "baseline" in table.index and "mean - baseline" not in table.index


def test_launch_rejects_bad_values_inline(app):
    at = _ok(app("launch"))
    at.number_input(key="f_smoke_population.teachers").set_value(0)
    at.button[0].click().run()
    errors = [e.value for e in _ok(at).error]
    assert any("population.teachers" in e and "greater than or equal to 1" in e for e in errors), errors
    assert not (Path(os.environ["POPULORA_JOBS_DIR"])).exists(), "nothing launched"


def test_launch_starts_a_validated_job(app, monkeypatch):
    import yaml

    from populora.platform.jobs import jobs

    started = []
    monkeypatch.setattr(jobs, "launch_training", lambda text, name="", env=None, ray_address=None, need=1, max_restarts=0: started.append(
        (text, name, env, ray_address, max_restarts)) or jobs.Job(id="fake", argv=[], dir=os.environ["POPULORA_JOBS_DIR"], created=0.0, name=name))
    at = _ok(app("launch"))
    at.text_input(key="f_smoke_name").set_value("ui-test; rm -rf /")  # stays a YAML value, never a shell word
    at.checkbox(key="f_smoke_baseline").check()
    at.number_input(key="f_smoke_restarts").set_value(2)  # the supervisor's restarts, for both runs
    at.button[0].click().run()
    _ok(at)
    assert [s[1] for s in started] == ["ui-test; rm -rf /", "ui-test; rm -rf /-baseline"]
    first, second = (yaml.safe_load(s[0]) for s in started)
    assert first["population"]["single_agent"] is False and second["population"]["single_agent"] is True
    # the compute-matched rule (configs/baseline.yaml of smoke.yaml), and one pair id linking the two runs
    assert (second["tasks"]["tasks_per_teacher"], second["tasks"]["rollouts"]) == (1, 4)
    assert first["pair"] and first["pair"] == second["pair"]
    assert started[0][2]["MLFLOW_TRACKING_URI"] == os.environ["MLFLOW_TRACKING_URI"]
    assert started[0][3] is None  # no Ray address: a local background process
    assert [s[4] for s in started] == [2, 2]


def test_launch_says_when_a_population_is_too_small_to_compute_match(app, monkeypatch):
    """The baseline box with a population whose adapters write under one proposal each (smoke's 2 teachers, 1
    task each, 4 adapters, 1 step): both runs start, and the page says why the pair may not be compute-matched."""
    from populora.platform.jobs import jobs

    started = []
    monkeypatch.setattr(jobs, "launch_training", lambda text, name="", env=None, ray_address=None, need=1, max_restarts=0: started.append(
        name) or jobs.Job(id="fake", argv=[], dir=os.environ["POPULORA_JOBS_DIR"], created=0.0, name=name))
    at = _ok(app("launch"))
    at.checkbox(key="f_smoke_baseline").check()
    at.text_area(key="f_smoke_overrides").set_value("steps=1\ntasks.tasks_per_teacher=1")
    at.button[0].click().run()
    _ok(at)
    assert len(started) == 2
    warned = [w.value for w in at.warning if "too small to compute-match" in w.value]
    assert len(warned) == 1 and "0.5 proposals each over its 1 step" in warned[0] and "steps >= 2" in warned[0], warned


def test_launch_with_a_ray_cluster_submits_ray_jobs(app, monkeypatch):
    """With ray.address naming a cluster the form submits a Ray Job (tests/platform/test_ray_jobs.py runs one for real);
    the submitted config joins the cluster from its head node (address auto)."""
    import yaml

    from populora.platform.jobs import jobs

    started = []
    monkeypatch.setattr(jobs, "launch_training", lambda text, name="", env=None, ray_address=None, need=1, max_restarts=0: started.append(
        (yaml.safe_load(text), ray_address)) or jobs.Job(id="fake", argv=[], dir=os.environ["POPULORA_JOBS_DIR"], created=0.0))
    monkeypatch.setenv("POPULORA_RAY_ADDRESSES", "ray://head.example:10001")  # the operator allows this cluster
    at = _ok(app("launch"))
    at.text_area(key="f_smoke_overrides").set_value("ray.address=ray://head.example:10001")
    at.button[0].click().run()
    _ok(at)
    assert [(cfg["ray"]["address"], address) for cfg, address in started] == [("auto", "ray://head.example:10001")]
    assert any("Ray Job" in i.value for i in at.info)


def test_launch_refuses_a_ray_address_the_operator_did_not_allow(app, monkeypatch):
    """The overrides box can type any address; the cluster token would go there, so only allowlisted ones run."""
    from populora.platform.jobs import jobs

    started = []
    monkeypatch.setattr(jobs, "launch_training", lambda *a, **k: started.append(a))
    monkeypatch.setenv("POPULORA_RAY_ADDRESSES", "ray://head.example:10001")
    at = _ok(app("launch"))
    assert at.selectbox(key="f_smoke_ray.address").options == ["(none: no Ray)", "local", "ray://head.example:10001"]
    at.text_area(key="f_smoke_overrides").set_value("ray.address=http://attacker.example:8265")
    at.button[0].click().run()
    errors = [e.value for e in _ok(at).error]
    assert any("ray.address" in e and "POPULORA_RAY_ADDRESSES" in e for e in errors), errors
    assert started == []


def test_launch_reports_an_unreachable_ray_cluster_inline(app, monkeypatch):
    monkeypatch.setenv("POPULORA_RAY_ADDRESSES", "http://127.0.0.1:9")
    at = _ok(app("launch"))
    at.text_area(key="f_smoke_overrides").set_value("ray.address=http://127.0.0.1:9")  # nothing listens on port 9
    at.button[0].click().run()
    _ok(at)
    assert any("ray.address" in e.value and "Ray" in e.value for e in at.error)


# ====================================================================== crashed runs, benchmark scores
@pytest.fixture(scope="module")
def synthetic_store(tmp_path_factory) -> dict:
    import synthetic_store

    tmp = tmp_path_factory.mktemp("ui_synth")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    ids = synthetic_store.build(uri, runs=2, members=4, tasks=12, steps=3)  # run 2 of 2 is left "running"
    return {"uri": uri, "baseline": ids[0], "finished": ids[1], "running": ids[2]}


def test_a_crashed_run_is_shown_as_crashed(synthetic_store, monkeypatch, tmp_path):
    """The trainer was SIGKILLed: MLflow still says running, the job's exit code says otherwise."""
    import json

    import streamlit as st

    run_id = synthetic_store["running"]
    job_dir = tmp_path / "jobs" / "20260101-000000-abcdef"
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({"id": job_dir.name, "argv": ["x"], "dir": str(job_dir), "created": 1.0, "pid": 1}))
    (job_dir / "log.txt").write_text("Killed\n")
    runlayout.write_run_id(job_dir, run_id)  # as the trainer does inside a job
    (job_dir / "exit_code").write_text("-9")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", synthetic_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "runs.py"), default_timeout=60)
    at.query_params["run"] = run_id
    _ok(at.run())
    assert f"populora train --resume {run_id}" in texts(at)
    for page in ("arms_race", "lineage", "tasks"):  # every page still renders what the run logged
        st.cache_data.clear()
        other = AppTest.from_file(str(VIEWS / f"{page}.py"), default_timeout=60)
        other.query_params["run"] = run_id
        _ok(other.run())


def test_run_header_names_the_tasks_format_and_an_unconfined_sandbox(app, store):
    """The run header says what the run really trained: the direct format is named as a reduction, and a run whose
    model code ran without confinement (sandbox.allow_unconfined) says so loudly."""
    from mlflow import MlflowClient

    at = _ok(app("runs", run=store["population"]))
    assert "tasks format `direct`" in texts(at) and any("a reduction of AZR" in i.value for i in at.info)
    assert not any("WITHOUT the sandbox" in e.value for e in at.error)
    client = MlflowClient(store["uri"])
    client.set_tag(store["population"], runlayout.SANDBOX_UNCONFINED, "true")
    try:
        at = _ok(app("runs", run=store["population"]))
        assert any("WITHOUT the sandbox" in e.value for e in at.error)
    finally:
        client.delete_tag(store["population"], runlayout.SANDBOX_UNCONFINED)


def test_compare_benchmark_table_with_deltas(synthetic_store, monkeypatch, tmp_path):
    import streamlit as st
    from mlflow import MlflowClient

    from populora.ui import store as ui_store

    client = MlflowClient(synthetic_store["uri"])
    st.cache_data.clear()
    for run, score in ((synthetic_store["finished"], 0.3), (synthetic_store["baseline"], 0.25)):
        for i, row in enumerate(ui_store.members(synthetic_store["uri"], run).itertuples()):
            client.log_metric(row.member_run_id, "eval/humaneval_plus/score", score + 0.01 * i)  # as populora eval logs
            client.log_metric(row.member_run_id, "eval/humaneval_plus/plus", score + 0.01 * i)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", synthetic_store["uri"])
    monkeypatch.setenv("POPULORA_JOBS_DIR", str(tmp_path / "jobs"))
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "compare.py"), default_timeout=60)
    at.query_params["run"] = synthetic_store["finished"]
    _ok(at.run())
    bench = at.dataframe[0].value  # the headline table: main score per benchmark, in %, with the averages
    assert list(bench.columns) == ["HumanEval+"]  # as populora report: no average over the one benchmark scored
    weakest = [r for r in bench.index if r.startswith("weakest member (")]  # by overall score, as populora report
    assert len(weakest) == 1 and bench.loc[weakest[0], "HumanEval+"] == pytest.approx(30.0)
    members = [r for r in bench.index if r[:1] in "TS" and r[1:].isdigit()]
    assert weakest[0] == f"weakest member ({bench.loc[members, 'HumanEval+'].idxmin()})"
    assert bench.loc["weakest - baseline", "HumanEval+"] == pytest.approx(5.0)
    assert bench.loc["mean - baseline", "HumanEval+"] == pytest.approx(6.5)
    at.toggle(key="cmp_all_metrics").set_value(True).run()
    _ok(at)
    every = at.dataframe[1].value
    assert every.loc["mean - baseline", "eval/humaneval_plus/plus"] == pytest.approx(0.065)


def test_lineage_dot_draws_crossover_with_two_parents():
    from populora.ui.lineage_graph import lineage_dot

    nodes = [dict(id="T0", role="teacher", parents=[], operator="init", step=0, generation=0, alive=False, replaced="", mu=20.0, sigma=2.0),
             dict(id="T1", role="teacher", parents=[], operator="init", step=0, generation=0, alive=True, replaced="", mu=26.0, sigma=2.0),
             dict(id="T2", role="teacher", parents=["T0", "T1"], operator="crossover", step=4, generation=1, alive=True, replaced="T0", mu=None, sigma=None)]
    dot = lineage_dot(nodes, selected="T2")
    assert '"T0" -> "T2" [label="crossover @4"' in dot and '"T1" -> "T2" [label="crossover @4"' in dot
    assert "dashed" in dot and "penwidth=3" in dot
    hidden = lineage_dot(nodes, show_dead=False)
    assert '"T0" [' not in hidden and '"T1" -> "T2"' in hidden


def test_launch_shows_the_plan_for_a_chosen_gpu(app):
    at = _ok(app("launch"))
    at.selectbox(key="f_smoke_plan_gpu").set_value("rtx4090-24gb")
    at.button[1].click().run()
    _ok(at)
    assert any("plan of smoke" in c.value and "rtx4090-24gb" in c.value for c in at.code)
    assert any(s.value.startswith("Fits") for s in at.success)
    assert not (Path(os.environ["POPULORA_JOBS_DIR"])).exists(), "nothing launched"


def test_launch_refuses_vllm_without_cuda_before_any_job(app, monkeypatch):
    from populora.platform.jobs import jobs
    from populora.training.run import preflight

    started = []
    monkeypatch.setattr(jobs, "launch_training", lambda *a, **k: started.append(a))
    monkeypatch.setattr(preflight, "cuda_available", lambda: False)  # as here, also on a GPU box
    at = _ok(app("launch"))
    at.text_area(key="f_smoke_overrides").set_value("model.generation=vllm")
    at.button[0].click().run()
    _ok(at)
    assert any("Not launched" in e.value and "vllm needs a CUDA GPU" in e.value for e in at.error)
    assert started == []


def test_a_fired_monitor_is_flagged_on_runs_and_arms_race(app, store):
    """A monitor's run tag (training.monitors via the CurriculumTracker) shows as a flag with what it means: in the
    run list, on the run's page and on the Arms race page; none while no monitor fired."""
    from mlflow import MlflowClient

    # the tiny run may fire other monitors (no_signal: its tasks are mostly invalid); collapse is not among them yet
    assert not any("collapse" in w.value for w in _ok(app("runs", run=store["population"])).warning)
    client = MlflowClient(store["uri"])
    client.set_tag(store["population"], runlayout.monitor_tag("collapse"), "fired at step 3: solve rate 0.40 -> 0.95")
    try:
        at = _ok(app("runs", run=store["population"]))
        table = at.dataframe[0].value.set_index("run_id")
        assert "collapse" in table.loc[store["population"], "monitors"] and "collapse" not in table.loc[store["baseline"], "monitors"]
        flag = next(w.value for w in at.warning if "collapse** monitor" in w.value)
        assert "collapse** monitor fired at step 3: solve rate 0.40 -> 0.95" in flag and "easy, narrow tasks" in flag
        at = _ok(app("arms_race", run=store["population"]))
        assert any("population: collapse** monitor fired at step 3" in w.value for w in at.warning)
        assert at.button(key="ar_fig_go") is not None  # the figure set is one click away
    finally:
        client.delete_tag(store["population"], runlayout.monitor_tag("collapse"))


def test_ui_imports_training_and_evaluation_only_through_their_public_api():
    """The UI depends on ``populora.training`` / ``populora.evaluation`` as declared in their ``__all__``, never on
    their submodules, so those can be reorganised without breaking it."""
    import re

    import populora.evaluation
    import populora.training

    public = {"training": set(populora.training.__all__), "evaluation": set(populora.evaluation.__all__)}
    for path in sorted((ROOT / "populora" / "ui").rglob("*.py")):
        text = path.read_text()
        assert not re.search(r"populora\.(training|evaluation)\.\w", text), f"{path} imports a submodule"
        for pkg, names in re.findall(r"from populora\.(training|evaluation) import ([^\n#]+)", text):
            used = {n.strip() for n in names.strip("() ").split(",") if n.strip()}
            assert used <= public[pkg], f"{path} uses {used - public[pkg]}, not in populora.{pkg}.__all__"
    for pkg in (populora.training, populora.evaluation):
        assert all(hasattr(pkg, name) for name in pkg.__all__)


def test_a_run_before_its_first_checkpoint_says_when_its_curves_appear(monkeypatch, tmp_path):
    """Steps reach MLflow with each checkpoint: a run still before its first one says so, naming checkpoint.every."""
    import streamlit as st

    from populora.platform.store.tracking import Tracker
    from populora.training import load_config
    from populora.training.run.run_log import RunLog

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = load_config(None, ["checkpoint.every=5"])
    log = RunLog.start(cfg, Tracker(uri))
    log.describe(cfg, tmp_path / "run")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    st.cache_data.clear()
    at = AppTest.from_file(str(VIEWS / "arms_race.py"), default_timeout=60)
    at.query_params["run"] = log.run_id
    _ok(at.run())
    assert any("has logged no step yet" in i.value and "checkpoint.every = 5" in i.value for i in at.info), texts(at)
