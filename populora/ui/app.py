"""The PopuLoRA web UI: ``populora ui`` runs ``streamlit run`` on this file.

One page per file under ``views/``; every MLflow read goes through ``populora.ui.store`` and every process
launch through ``populora.platform.jobs.jobs``.
"""

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent

st.set_page_config(page_title="PopuLoRA", page_icon="🧬", layout="wide")

from populora.ui.auth import require_login  # noqa: E402 - set_page_config must be the first Streamlit call

require_login()  # before any page renders (a no-op unless POPULORA_UI_TOKEN is set)

runs = st.Page(HERE / "views" / "runs.py", title="Runs", icon=":material/list:", url_path="runs-home", default=True)


def _runs_by_name() -> None:
    """``/runs`` typed or bookmarked: Streamlit serves the default page at ``/`` only and would answer "Page not
    found", so this hidden page sends the visitor there, query (``?run=...``) included."""
    st.switch_page(runs, query_params=st.query_params.to_dict())


pages = [
    runs,
    st.Page(HERE / "views" / "launch.py", title="Launch", icon=":material/rocket_launch:", url_path="launch"),
    st.Page(HERE / "views" / "arms_race.py", title="Arms race", icon=":material/monitoring:", url_path="arms_race"),
    st.Page(HERE / "views" / "lineage.py", title="Lineage", icon=":material/account_tree:", url_path="lineage"),
    st.Page(HERE / "views" / "tasks.py", title="Tasks", icon=":material/extension:", url_path="tasks"),
    st.Page(HERE / "views" / "compare.py", title="Compare", icon=":material/balance:", url_path="compare"),
    st.Page(HERE / "views" / "league.py", title="League", icon=":material/leaderboard:", url_path="league"),
    st.Page(_runs_by_name, title="Runs", url_path="runs", visibility="hidden"),
]
nav = st.navigation(pages)
with st.sidebar:
    from populora.ui import store

    st.caption(f"MLflow store: `{store.uri()}`")
store.prepare(store.uri())  # a fresh store: "preparing the store", not a bare spinner for a minute
nav.run()
