"""`populora --help` and `populora <command> --help` answer without loading torch or MLflow (seconds each): the
parser of every command is built from argparse alone, and the dispatch imports only the chosen command's module
(populora/cli/__init__.py). Also the packages the UI imports, which promise the same in their docstrings."""

import json
import subprocess
import sys

import pytest

import populora

HEAVY = ("torch", "mlflow", "transformers", "peft", "vllm", "ray")

# runs the CLI's main in a fresh interpreter, then prints which heavy packages it had imported
PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
try:
    if argv[0] == "import":
        __import__(argv[1])
    else:
        from populora.cli import main
        main(argv)
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))))
"""


def loaded(argv: list[str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# one per way a --help is answered: the top parser (train, sweep, export, plan, runs, jobs share it), a layer's
# own parser (eval, report and data share evaluation/cli.py), the sandbox's, the UI's, the sandbox bench's, the league's
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["train", "--help"], ["runs", "--help"], ["eval", "--help"],
                                  ["sandbox", "--help"], ["ui", "--help"], ["bench", "verifier", "--help"],
                                  ["bench", "stats", "--help"], ["league", "--help"]])
def test_help_loads_no_torch_nor_mlflow(argv):
    heavy = loaded(argv)
    assert heavy == [], f"populora {' '.join(argv)} imported {heavy}"


@pytest.mark.parametrize("package", ["populora.evaluation", "populora.training"])
def test_the_packages_the_ui_imports_load_no_model_library(package):
    assert loaded(["import", package]) == []


def test_the_entry_point_exits_with_mains_code_and_its_objects_out_of_the_last_collection():
    # entry() = main(), gc.freeze(), exit: the interpreter's final collection skips what the command loaded
    probe = ("import atexit, gc\nimport populora.cli as cli\ncli.main = lambda: 3\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 1000))\ncli.entry()")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 3 and out.stdout.strip() == "frozen True", out


def test_every_bench_is_named_where_a_wrong_name_is_answered():
    """`populora bench NAME` dispatches some names before the bench parser (stats, scale, eval, verifier: their
    own options); the parser's choices, the error for a wrong name and `populora --help` still list every one, and
    a dispatched bench named after an option (not first) says to put it first instead of running another bench."""
    from populora.cli.bench_names import BENCHES

    wrong = subprocess.run([sys.executable, "-m", "populora.cli", "bench", "nope"], capture_output=True, text=True,
                           timeout=300)
    assert wrong.returncode == 2 and all(f"'{b}'" in wrong.stderr for b in BENCHES), wrong.stderr
    top = subprocess.run([sys.executable, "-m", "populora.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert "|".join(BENCHES) in top.stdout.replace("\n", "").replace(" ", "")
    late = subprocess.run([sys.executable, "-m", "populora.cli", "bench", "--json", "stats"], capture_output=True,
                          text=True, timeout=300)
    assert late.returncode == 2 and "put the bench's name first: populora bench stats" in late.stderr, late.stderr


def test_python_m_populora_is_the_command_with_its_import_name_check():
    """`python -m populora` runs the CLI as the installed script does, through populora_platform.main: first the
    check that `import populora` is this distribution's (PyPI's `populora` is another project), then the command."""
    version = subprocess.run([sys.executable, "-m", "populora", "--version"], capture_output=True, text=True,
                             timeout=120)
    assert version.returncode == 0 and version.stdout.split() == [populora.__distribution__, populora.__version__], version
    # the same entry with another package answering `import populora`: one line naming it, exit 2, no command run
    other = ("import runpy, populora\npopulora.__distribution__ = 'populora'\n"
             "runpy.run_module('populora', run_name='__main__', alter_sys=True)")
    shadowed = subprocess.run([sys.executable, "-c", other, "--version"], capture_output=True, text=True, timeout=120)
    assert shadowed.returncode == 2 and shadowed.stdout == "", shadowed
    assert "`import populora` is not populora-platform's package" in shadowed.stderr, shadowed.stderr
