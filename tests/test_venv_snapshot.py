"""scripts/venv-snapshot.sh, which makes a fresh clone's venvs (Makefile): a venv saved as a snapshot, byte-code
included, is restored at another path by hard links, its console scripts run there, its byte-code is used as it is,
and the project's own files are never in it; a venv that exists is never replaced; another key finds no snapshot;
a restore that fails leaves no venv behind.

The venv here is a real one (``python -m venv``, with pip: the restore checks that pip runs) with a package and
the project written into its site-packages as an install leaves them (files, a dist-info with its RECORD, a
console script): pip would need an index to build them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "venv-snapshot.sh"
KEYFILES = ("Makefile", "pyproject.toml")


def snapshot(cmd: str, venv: Path, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "POPULORA_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": ""}
    return subprocess.run(["bash", str(SCRIPT), cmd, "demo", str(venv), sys.executable, *KEYFILES], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def install_by_hand(venv: Path) -> None:
    """A package ``tinydep`` with a console script, and the project ``demo-proj`` installed editable."""
    site = site_packages(venv)
    (site / "tinydep").mkdir()
    (site / "tinydep" / "__init__.py").write_text("def main():\n    print('tinydep runs')\n")
    script = venv / "bin" / "tinydep"
    script.write_text(f"#!{venv}/bin/python\nimport sys\nfrom tinydep import main\nsys.exit(main())\n")
    script.chmod(0o755)
    (site / "__editable__.demo_proj-0.1.pth").write_text("/somewhere/else/demo\n")
    info = site / "demo_proj-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-proj\nVersion: 0.1\n")
    project_script = venv / "bin" / "demo"
    project_script.write_text(f"#!{venv}/bin/python\nprint('demo')\n")
    (info / "RECORD").write_text("__editable__.demo_proj-0.1.pth,,\ndemo_proj-0.1.dist-info/METADATA,,\n"
                                 "demo_proj-0.1.dist-info/RECORD,,\n../../../bin/demo,,\n")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A clone (its key files), a venv installed there and saved as a snapshot in a cache of its own."""
    top = tmp_path_factory.mktemp("snap")
    clone, cache = top / "clone", top / "cache"
    clone.mkdir()
    (clone / "Makefile").write_text("all:\n")
    (clone / "pyproject.toml").write_text('[project]\nname = "demo-proj"\nversion = "0.1"\n')
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install_by_hand(venv)
    (venv / ".wheelhouse").write_text("/some/wheelhouse\n")
    out = snapshot("save", venv, clone, cache)
    assert out.returncode == 0, out.stdout + out.stderr
    snap, = (cache / "venvs").glob("demo-*")
    return {"clone": clone, "cache": cache, "venv": venv, "snap": snap}


def test_a_restored_venv_shares_the_snapshot_s_files_and_byte_code_and_runs_its_scripts(saved, tmp_path):
    other = tmp_path / "other-clone"  # another clone: the same key files at another path
    other.mkdir()
    for f in KEYFILES:
        (other / f).write_text((saved["clone"] / f).read_text())
    venv = other / ".venv"
    out = snapshot("restore", venv, other, saved["cache"])
    assert out.returncode == 0, out.stdout + out.stderr
    source = site_packages(venv) / "tinydep" / "__init__.py"
    assert source.stat().st_ino == (site_packages(saved["snap"]) / "tinydep" / "__init__.py").stat().st_ino  # a link
    pyc, = (source.parent / "__pycache__").glob("__init__.*.pyc")  # compiled when saved
    before = (pyc.stat().st_ino, pyc.stat().st_mtime_ns)
    run = subprocess.run([str(venv / "bin" / "tinydep")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})  # a stale .pyc would be written anew
    assert run.returncode == 0 and run.stdout == "tinydep runs\n", run.stderr
    assert (venv / "bin" / "tinydep").read_text().startswith(f"#!{venv}/bin/python\n")
    assert (pyc.stat().st_ino, pyc.stat().st_mtime_ns) == before  # the snapshot's byte-code was valid: not rewritten
    # the project is the clone's: none of its files came along
    assert not list(site_packages(venv).glob("demo_proj*")) and not list(site_packages(venv).glob("__editable__*"))
    assert not (venv / "bin" / "demo").exists()
    assert (venv / ".wheelhouse").read_text() == "/some/wheelhouse\n"
    # removing a file of the restored venv (as pip does to replace it) leaves the snapshot's
    source.unlink()
    assert (site_packages(saved["snap"]) / "tinydep" / "__init__.py").is_file()


def test_an_existing_venv_is_not_replaced_and_another_key_finds_no_snapshot(saved, tmp_path):
    out = snapshot("restore", saved["venv"], saved["clone"], saved["cache"])
    assert out.returncode == 3 and "exists" in out.stdout
    assert (site_packages(saved["venv"]) / "demo_proj-0.1.dist-info" / "RECORD").is_file()  # untouched
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "Makefile").write_text("all:\n\techo changed\n")
    (changed / "pyproject.toml").write_text((saved["clone"] / "pyproject.toml").read_text())
    out = snapshot("restore", changed / ".venv", changed, saved["cache"])
    assert out.returncode == 3 and "none for demo" in out.stdout and not (changed / ".venv").exists()


@pytest.mark.parametrize("broken, said", [("pip", "pip does not run"), ("origin", "failed (line ")])
def test_a_failed_restore_leaves_no_venv(saved, tmp_path, broken, said):
    """A snapshot whose pip cannot run (the check at the end), or one missing the file a step reads (any failure)."""
    cache = tmp_path / "cache"
    (cache / "venvs").mkdir(parents=True)
    copy = cache / "venvs" / saved["snap"].name
    subprocess.run(["cp", "-al", str(saved["snap"]), str(copy)], check=True)
    for path in site_packages(copy).glob("pip*") if broken == "pip" else [copy / "origin"]:
        subprocess.run(["rm", "-rf", str(path)], check=True)
    out = snapshot("restore", tmp_path / ".venv", saved["clone"], cache)
    assert out.returncode == 3 and said in out.stderr, out.stdout + out.stderr
    assert not (tmp_path / ".venv").exists()
