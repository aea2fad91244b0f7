"""``populora ui``: serve the web UI with Streamlit, on 127.0.0.1:8501 unless told otherwise.

The UI can launch training processes, so it listens on localhost only by default; ``--host 0.0.0.0`` (or any
non-loopback address) is an explicit choice and prints a warning: anyone who can reach the port can start and
stop runs. Put it behind an authenticating proxy or an SSH tunnel instead when you can, or at least set
``POPULORA_UI_TOKEN`` (``populora.ui.auth``): every browser session then has to give it before any page renders.

Streamlit's own guards are set explicitly, not left to its defaults: XSRF protection (with CORS, which it
requires) and ``server.allowedHosts``, the Host names its WebSocket accepts (DNS-rebinding guard; Streamlit
accepts any Host when the list is empty). Allowed: the loopback names, the ``--host`` address, this machine's
name when listening beyond loopback, and what ``--allowed-host`` / ``POPULORA_UI_ALLOWED_HOSTS`` add.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import sys
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
WILDCARD = {"0.0.0.0", "::", ""}
ENV_ALLOWED_HOSTS = "POPULORA_UI_ALLOWED_HOSTS"


def allowed_hosts(host: str = "127.0.0.1", extra: list[str] | None = None) -> list[str]:
    """Host names the UI answers to (Streamlit's ``server.allowedHosts``; ports are ignored).

    >>> allowed_hosts("127.0.0.1", ["ui.example.org"])
    ['localhost', '127.0.0.1', '::1', '[::1]', 'ui.example.org']
    """
    names = ["localhost", "127.0.0.1", "::1", "[::1]"]
    if host not in LOOPBACK | WILDCARD:
        names.append(host)
    if host not in LOOPBACK:  # reachable from elsewhere: by this machine's name too
        names += [socket.gethostname(), socket.getfqdn()]
    names += [h.strip() for h in os.environ.get(ENV_ALLOWED_HOSTS, "").split(",")]
    names += extra or []
    return list(dict.fromkeys(n for n in names if n))


def build_argv(host: str = "127.0.0.1", port: int = 8501, extra: list[str] | None = None,
               hosts: list[str] | None = None) -> list[str]:
    """The ``streamlit run`` command line (a list: nothing goes through a shell)."""
    guards = ["--server.enableXsrfProtection", "true", "--server.enableCORS", "true"]
    for name in hosts if hosts is not None else allowed_hosts(host):
        guards += ["--server.allowedHosts", name]
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.address", host, "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer",  # no Deploy / developer menu
            *guards, *(extra or [])]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="populora ui", description="Serve the PopuLoRA web UI (Streamlit)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes the UI, "
                        "which can start and stop training runs, to the network)")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name browsers reach the UI by (repeatable; also POPULORA_UI_ALLOWED_HOSTS, comma "
                        "separated); requests with any other Host header are refused. Loopback names always work")
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
    argv_run = build_argv(args.host, args.port, hosts=allowed_hosts(args.host, args.allowed_host))
    if args.dry_run:
        print(" ".join(argv_run))
        return 0
    if args.host not in LOOPBACK and not os.environ.get("POPULORA_UI_TOKEN"):
        print(f"warning: listening on {args.host}: anyone who can reach port {args.port} can launch and stop runs; "
              "set POPULORA_UI_TOKEN to require a token (see docs/ui.md)", file=sys.stderr)
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
