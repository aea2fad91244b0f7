"""The web UI (Streamlit): ``app.py`` is the entry ``populora ui`` serves, ``views/`` holds one page per file (Launch,
Runs, Arms race, Lineage, Tasks, Compare, League), and the modules here are what the pages share: every MLflow read
(``store``), the forms generated from the configs (``form``, ``eval_panel``), charts and tables as pure functions
(``charts``, ``compare_table``, ``eval_curves``, ``lineage_graph``, ``league_view``, ``task_reasons``), experiments
and sweeps launched as jobs (``experiments``, ``sweeps``), the optional login (``auth``) and ``cli``.

The UI reads the MLflow store and saved artifacts and starts work through ``populora.platform``'s jobs; it computes
no statistic of its own (the report's come from ``populora.evaluation``)."""
