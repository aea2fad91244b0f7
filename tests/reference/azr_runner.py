"""Child side of :mod:`tests.reference.azr`: runs AZR's executor step on model code, one forked process per job.

Started as a script (``python azr_runner.py``), it reads one JSON job per line on stdin and writes one JSON
result per line on stdout. Each job runs in a fresh fork with a wall-clock limit, so model code can neither hang
nor touch the parent. Nothing from the project is imported here: the children run with what AZR's worker has.
"""

import io
import json
import os
import pickle
import re
import resource
import select
import signal
import sys
import traceback
from contextlib import redirect_stdout


def azr_execute(code: str) -> tuple[str, str]:
    """``PythonExecutor.execute`` with ``auto_mode=True`` (python_executor.py:302-346), on the lines of
    ``process_generation_to_code`` (python_executor.py:137-138), in a fresh ``GenericRuntime`` (:38-76)."""
    lines = code.strip().split("\n")
    g: dict = {}

    def exec_code(piece: str) -> None:  # GenericRuntime.exec_code, python_executor.py:50-54
        if re.search(r"(\s|^)?input\(", piece):
            raise RuntimeError()
        exec(piece, g)

    try:
        if "print(" in lines[-1]:
            out = io.StringIO()
            with redirect_stdout(out):
                exec_code("\n".join(lines))
            result = out.getvalue()
        else:
            exec_code("\n".join(lines[:-1]))
            result = eval(lines[-1], g)
        report = "Done"
        str(result)
        pickle.dumps(result)
    except:  # noqa: E722 -- AZR's bare except: SystemExit and StopIteration become reports too
        result = ""
        report = traceback.format_exc().split("\n")[-2]
    return str(result), str(report)


# The trainer-side evals see python_executor.py's module globals (its imports, python_executor.py:5-23)
TRAINER_GLOBALS = {}
for _name, _module in (("copy", "copy"), ("datetime", "datetime"), ("io", "io"), ("logging", "logging"),
                       ("pickle", "pickle"), ("traceback", "traceback"), ("ast", "ast"), ("time", "time"),
                       ("np", "numpy")):
    try:
        TRAINER_GLOBALS[_name] = __import__(_module)
    except ImportError:
        pass


def trainer_eval(expr: str, names: dict) -> dict:
    """An ``eval`` AZR runs in its trainer process (python_executor.py:193, :183, :211), with the method's
    locals ``names``: whether it raised, and the truth of its value."""
    try:
        return {"raised": False, "truthy": bool(eval(expr, {**TRAINER_GLOBALS, **names}))}
    except BaseException:  # AZR: bare except around the fast path; the retry loop around eval(correct)
        return {"raised": True, "truthy": False}


def run_child(job: dict, wfd: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    sys.stdout = open(os.devnull, "w")
    if job["op"] == "exec":
        res, report = azr_execute(job["code"])
        out = {"result": res, "report": report}
    else:
        out = trainer_eval(job["expr"], job.get("names", {}))
    data = json.dumps(out).encode()
    with os.fdopen(wfd, "wb") as w:
        w.write(data)


def run(job: dict) -> dict:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            run_child(job, wfd)
        finally:
            os._exit(0)
    os.close(wfd)
    chunks, timed_out = [], False
    with os.fdopen(rfd, "rb") as r:
        while True:
            ready, _, _ = select.select([r], [], [], job["timeout"])
            if not ready:
                timed_out = True
                break
            chunk = r.read1(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    if timed_out:
        # batch_apply's pool timeout (python_executor.py:390-393); a trainer eval that hangs counts as raised
        return {"result": "", "report": "Timeout Error", "raised": True, "truthy": False}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:  # the worker died: pebble's ProcessExpired (python_executor.py:394-396)
        return {"result": "", "report": "Error: worker process expired", "raised": True, "truthy": False}


def main() -> None:
    for line in sys.stdin:
        sys.stdout.write(json.dumps(run(json.loads(line))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
