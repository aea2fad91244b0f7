"""Check the port (``azr.py``) against AZR's own modules: run the whole corpus through the reference twice, once
with the port's functions and once with AZR's real ones swapped in, and compare every verdict.

Needs AZR's source (the ``fetch`` tool's mirror of LeapLabTHU/Absolute-Zero-Reasoner) and pebble +
timeout_decorator (the test extra); CI has no mirror, so this is run by hand and its result recorded:

    PYTHONPATH=.:tests python -m reference.compare_upstream /work/.mirror/LeapLabTHU+Absolute-Zero-Reasoner/repo

AZR's modules that import without its trainer are imported as they are (``utils/code_utils/*``,
``rewards/code_reward.py`` with its formatting-only imports stubbed); from ``reward_managers.py`` and
``custom_evaluate.py`` (which import torch, verl and math_verify) the functions used are compiled from their
source text. The one case whose answer never ends is left out: AZR evaluates it in the calling process.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from reference import azr, differential
from reference.azr_corpus import corpus

FILES = ["utils/code_utils/python_executor.py", "utils/code_utils/templates.py", "utils/code_utils/checks.py",
         "utils/code_utils/parsers.py", "rewards/code_reward.py", "rewards/reward_managers.py",
         "rewards/custom_evaluate.py"]
HANGS = {"code_o double: endless"}


def extract(mirror: str, into: Path) -> Path:
    """AZR's files at the commit, as a package without its heavy ``__init__`` files."""
    root = into / "absolute_zero_reasoner"
    for name in FILES:
        text = subprocess.run(["git", "--git-dir", str(Path(mirror)), "show", f"{azr.COMMIT}:absolute_zero_reasoner/{name}"],
                              check=True, capture_output=True, text=True).stdout
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in (root, root / "utils", root / "utils/code_utils", root / "rewards"):
        (folder / "__init__.py").write_text("")
    return into


def function_from(path: Path, name: str, namespace: dict):
    """A top-level function or a method (``Class.method``) compiled from a file's source text."""
    tree = ast.parse(path.read_text())
    cls, _, fn = name.rpartition(".")
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body if cls else tree.body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == fn)
    node.decorator_list = []
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace[fn]


class RealExecutor:
    """AZR's PythonExecutor behind the port's Executor interface."""

    def __init__(self, timeout_s: float):
        from absolute_zero_reasoner.utils.code_utils.python_executor import PythonExecutor

        self.ex = PythonExecutor(timeout_length=timeout_s, ast_check=True)

    def close(self):
        self.ex.cleanup()

    def check_all(self, code, inputs, banned_keywords, imports):
        return self.ex.check_all(code=code, inputs=inputs, banned_keywords=banned_keywords, check_determinism=True,
                                 imports=imports, check_error=False, banned_keywords_for_errors_and_exceptions=[])

    def eval_input_prediction(self, code, gold_output, agent_input, imports):
        return self.ex.eval_input_prediction(code=code, gold_output=gold_output, agent_input=agent_input, imports=imports)

    def eval_output_prediction(self, code, gold_output, agent_output, imports):
        return self.ex.eval_output_prediction(code=code, gold_output=gold_output, agent_output=agent_output, imports=imports)


def swap_in_azr(src: Path) -> None:
    """Replace the port's functions by AZR's own."""
    for stub in ("complexipy", "black", "autopep8"):  # code_reward.py's formatting/complexity imports, unused here
        module = types.ModuleType(stub)
        module.code_complexity = module.format_str = module.fix_code = module.Mode = lambda *a, **k: None
        sys.modules[stub] = module
    sys.path.insert(0, str(src))
    from absolute_zero_reasoner.rewards import code_reward
    from absolute_zero_reasoner.utils.code_utils import parsers

    rewards = src / "absolute_zero_reasoner/rewards"
    ns = {"re": __import__("re"), "Tuple": tuple}
    eio = function_from(rewards / "reward_managers.py", "CodeIORewardManager.extract_input_output", ns)
    extract_answer = function_from(rewards / "custom_evaluate.py", "extract_answer", ns)
    format_reward = function_from(rewards / "custom_evaluate.py", "get_format_reward", ns)
    azr.parse_code_input_output = lambda text: code_reward.parse_code_input_output(text, parse_output=False)
    azr.parse_inputs_message = lambda text, num_inputs=azr.NUM_INPUTS: code_reward.parse_inputs_message(text, num_inputs)
    azr.parse_code_function = code_reward.parse_code_function
    azr.parse_imports = parsers.parse_imports
    azr.extract_input_output = lambda content, want: eio(content, want == "input", want == "output")
    azr.extract_answer = lambda text: extract_answer(text, "answer_conditional")
    azr.format_ok = lambda generation: format_reward(generation, "answer_conditional") > 0
    azr.Executor = RealExecutor


def main(mirror: str) -> int:
    cases = [c for c in corpus() if c.id not in HANGS]
    port = differential.reference_verdicts(cases)
    with tempfile.TemporaryDirectory() as tmp:
        swap_in_azr(extract(mirror, Path(tmp)))
        real = differential.reference_verdicts(cases, workers=1)
    differ = {c.id: (port[c.id], real[c.id]) for c in cases if port[c.id] != real[c.id]}
    print(f"{len(cases) - len(differ)}/{len(cases)} verdicts of the port equal AZR's own modules'")
    for cid, (p, r) in differ.items():
        print(f"  - {cid}: port {str(p)[:100]} | AZR {str(r)[:100]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
