"""Doctest collection over the package (``--doctest-modules``, pyproject.toml): pytest imports every module here
to find its examples, so the modules that cannot be imported outside their runtime are listed, with the reason."""

collect_ignore = [
    "ui/app.py",  # the Streamlit entry point: builds the page navigation and runs it on import
]
collect_ignore_glob = [
    "ui/views/*.py",  # Streamlit pages: each draws itself (and reads the MLflow store) on import;
                      # their pure helpers live in importable modules (e.g. ui/compare_table.py)
]
