"""``populora sandbox exec|check`` and ``bench verifier``, called as functions and as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from populora.platform.sandbox.cli import UsageError, bench_verifier_main
from populora.training.tasks.cli import load_task, sandbox_main


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_exec_prints_one_json_object(tmp_path, capsys):
    prog = tmp_path / "p.py"
    prog.write_text("print('hi')\nraise SystemExit(4)")
    assert sandbox_main(["exec", str(prog), "--timeout", "2", "--memory-mb", "256"]) == 0  # sandbox worked
    out = _last_json(capsys)
    assert set(out) == {"status", "stdout", "stderr", "returncode", "wall_s"}
    assert (out["status"], out["stdout"], out["returncode"]) == ("error", "hi\n", 4)


def test_exec_timeout_is_still_exit_0(tmp_path, capsys):
    prog = tmp_path / "loop.py"
    prog.write_text("while True: pass")
    assert sandbox_main(["exec", str(prog), "--timeout", "0.3"]) == 0
    assert _last_json(capsys)["status"] == "timeout"


@pytest.mark.parametrize("task, expected", [
    ({"type": "validate", "program": "def f(a):\n    return a", "input": "'x'"},
     {"valid": True, "correct": None, "status": "ok", "reason": "ok", "output": "'x'"}),
    ({"type": "code_o", "program": "def f(a):\n    return a + 1", "input": "1", "answer": "2"},
     {"valid": True, "correct": True, "status": "ok", "reason": "ok"}),
    ({"type": "code_i", "program": "def f(a):\n    return a + 1", "output": "2", "answer": "5"},
     {"valid": True, "correct": False, "status": "wrong"}),
    ({"type": "code_f", "program": "def f(a):\n    return a", "inputs": ["1", "2"], "answer": "def f(b):\n    return b"},
     {"valid": True, "correct": True, "status": "ok"}),
])
def test_check_task_forms(tmp_path, capsys, task, expected):
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task))
    assert sandbox_main(["check", str(path)]) == 0
    out = _last_json(capsys)
    assert {k: out[k] for k in expected} == expected
    assert {"valid", "correct", "status", "reason"} <= set(out)


def test_check_under_a_preset_uses_its_rules(tmp_path, capsys):
    # AZR bans no import in a code_f answer and runs it with the task's imports (python_executor.py:169-172,
    # reward_managers.py:489-498): paper-4t4s judges as AZR does; the default rules ban random
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"type": "code_f", "program": "import math\ndef f(x):\n    return math.isqrt(x)",
                                "inputs": ["4", "9", "16", "26"], "answer": "import random\ndef f(x):\n    return math.isqrt(x)"}))
    assert sandbox_main(["check", str(path)]) == 0
    assert _last_json(capsys)["status"] == "banned"
    assert sandbox_main(["check", str(path), "--config", "paper-4t4s"]) == 0
    assert _last_json(capsys)["correct"] is True
    assert sandbox_main(["check", str(path), "--config", "no-such-preset"]) == 2
    assert "presets: " in capsys.readouterr().err


@pytest.mark.parametrize("completion, reason", [
    ("no layout at all", "format: no <think>...</think> <answer>...</answer> layout"),
    ("x</think><answer>def f(s): return s</answer>", "format: the answer has no fenced code block"),
])
def test_check_a_completion_says_what_failed(tmp_path, capsys, completion, reason):
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"type": "code_f", "program": "def f(s):\n    return s", "inputs": ["1", "2"],
                                "completion": completion}))
    assert sandbox_main(["check", str(path), "--config", "paper-4t4s"]) == 0
    assert _last_json(capsys) == {"valid": True, "correct": False, "status": "format", "reason": reason}


@pytest.mark.parametrize("content, message", [
    (None, "not found"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"type": "code_x", "program": "p"}', "unknown or missing \"type\""),
    ('{"type": "code_o", "program": "def f(a): return a"}', "needs key(s) 'input', 'answer'"),
    ('{"type": "code_f", "program": "p", "inputs": "1", "answer": "p"}', "'inputs' must be a list of strings"),
])
def test_bad_task_files_exit_2_with_a_clear_message(tmp_path, capsys, content, message):
    path = tmp_path / "task.json"
    if content is not None:
        path.write_text(content)
    assert sandbox_main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "populora sandbox: error" in err
    with pytest.raises(UsageError):
        load_task(str(path))


def test_usage_errors_exit_2(capsys):
    assert sandbox_main([]) == 2
    assert sandbox_main(["exec", "/no/such/file.py"]) == 2
    assert "not found" in capsys.readouterr().err


def test_bench_json_last_line(capsys):
    assert bench_verifier_main(["--json", "-n", "200", "--naive-n", "3"]) == 0
    figures = _last_json(capsys)
    assert set(figures) == {"execs_per_s", "naive_execs_per_s", "ratio_vs_naive", "cpu_ms_per_exec",
                            "idle_capacity_execs_per_s", "fork_exit_per_s", "fraction_of_fork_limit", "uid",
                            "layers", "fork_exit_cpu_ms", "faults_per_exec", "fork_exit_faults_per_exec",
                            "cow_fault_us", "fault_bound_fraction"}
    assert figures["execs_per_s"] > figures["naive_execs_per_s"] > 0
    # a bare fork + exit does strictly less work than an isolated execution through the same workers
    assert figures["fork_exit_per_s"] > 0
    # computed from the unrounded rates, so recomputing it from the printed (rounded) ones agrees to rounding
    assert figures["fraction_of_fork_limit"] == pytest.approx(figures["execs_per_s"] / figures["fork_exit_per_s"], abs=2e-3)
    assert figures["uid"] == os.geteuid() and "seccomp" in figures["layers"].split(",")
    # an isolated execution writes (copy-on-write faults) many more of the worker's pages than a bare fork + exit
    assert figures["faults_per_exec"] > figures["fork_exit_faults_per_exec"] + 50 > 50
    assert figures["cow_fault_us"] > 0 and 0 < figures["fault_bound_fraction"] < 1


def test_copy_on_write_measurement_faults_once_per_written_page():
    """The forks of ``bench_cow_fault`` differ by exactly the pages their children write: one fault each
    (counted by the kernel, so this holds on a loaded machine too)."""
    from populora.platform.sandbox.bench import bench_fork_exit
    from populora.platform.sandbox.pool import Sandbox

    with Sandbox(workers=1) as sb:
        sb.run_many(["pass"] * 5)
        one = bench_fork_exit(sb, 100, touch=(128, 1))
        many = bench_fork_exit(sb, 100, touch=(128, 128))
    assert 120 <= many["faults"] - one["faults"] <= 134, (one, many)  # 127 more pages written


def test_module_entry_point_as_subprocess(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import sys\nprint(sys.stdin.read().upper())")
    cmd = [sys.executable, "-m", "populora.platform.sandbox.cli", "exec", str(prog), "--stdin"]
    out = subprocess.run(cmd, input="abc", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stdout"] == "ABC\n"


def test_check_through_the_populora_cli_as_subprocess(tmp_path):
    # ``check`` needs the task kinds (training), so it is added to the sandbox CLI by populora's own CLI
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"type": "code_o", "program": "def f(a):\n    return {a}", "input": "1",
                                "answer": "frozenset({2})"}))
    cmd = [sys.executable, "-m", "populora.cli", "sandbox", "check", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # AZR's check is Python equality ({1} == frozenset({1}) would pass): a different value is wrong
    assert json.loads(out.stdout.strip().splitlines()[-1])["status"] == "wrong"


def test_populora_bench_verifier_passes_its_options_through():
    """``populora bench verifier -n N --json``: the top-level CLI hands the benchmark's own options to it."""
    cmd = [sys.executable, "-m", "populora.cli", "bench", "verifier", "-n", "100", "--naive-n", "2", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(100 x 'print(1 + 1)'" in out.stdout
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["fork_exit_per_s"] > 0 and figures["fraction_of_fork_limit"] > 0
