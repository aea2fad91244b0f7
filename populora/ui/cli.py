"""``populora ui``: serve the web UI with Streamlit, on 127.0.0.1:8501 unless told otherwise.

The UI can launch training processes, so it listens on localhost only by default; ``--host 0.0.0.0`` (or any
non-loopback address) is an explicit choice and prints a warning: anyone who can reach the port can start and
stop runs. Put it behind an authenticating proxy or an SSH tunnel instead when you can.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def build_argv(host: str = "127.0.0.1", port: int = 8501, extra: list[str] | None = None) -> list[str]:
    """The ``streamlit run`` command line (a list: nothing goes through a shell)."""
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.address", host, "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", *(extra or [])]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora ui", description="Serve the PopuLoRA web UI (Streamlit)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes the UI, "
                        "which can start and stop training runs, to the network)")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument("--tracking-uri", help="MLflow store to read and launch into (default: MLFLOW_TRACKING_URI, "
                                          "else sqlite:///mlflow.db in the working directory)")
    p.add_argument("--dry-run", action="store_true", help="print the streamlit command and exit")
    return p


def ui_main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 0 < args.port < 65536:
        print(f"error: --port {args.port} is not a TCP port (1-65535)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if args.tracking_uri:
        env["MLFLOW_TRACKING_URI"] = args.tracking_uri
    argv_run = build_argv(args.host, args.port)
    if args.dry_run:
        print(" ".join(argv_run))
        return 0
    if args.host not in LOOPBACK:
        print(f"warning: listening on {args.host}: anyone who can reach port {args.port} can launch and stop runs",
              file=sys.stderr)
    if importlib.util.find_spec("streamlit") is None:  # fail early with an install hint, not a subprocess traceback
        print("error: the UI needs streamlit: pip install 'streamlit>=1.50,<2'", file=sys.stderr)
        return 2
    shown = "localhost" if args.host in LOOPBACK else args.host
    print(f"PopuLoRA UI on http://{shown}:{args.port}  (store: {env.get('MLFLOW_TRACKING_URI') or 'sqlite:///mlflow.db'}; Ctrl+C stops)", flush=True)
    sys.stdout.flush()
    # replace this process with streamlit: a SIGTERM to `populora ui` then stops the server, no orphan left behind
    os.execve(argv_run[0], argv_run, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(ui_main())
