"""The first page load on an empty store says it is preparing the store (issue 67): MLflow builds a fresh store's
tables for up to a minute, which the page showed as a bare spinner."""

from __future__ import annotations

import contextlib

import pytest

pytest.importorskip("streamlit")

from populora.ui import store


def test_a_fresh_store_is_prepared_under_words_and_a_ready_one_silently(tmp_path, monkeypatch):
    said = []

    @contextlib.contextmanager
    def spinner(text, **_):
        said.append(text)
        yield

    monkeypatch.setattr(store.st, "spinner", spinner)
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    store.prepare(uri)
    assert len(said) == 1 and said[0].startswith("Preparing the MLflow store") and "creating its tables" in said[0]
    assert (tmp_path / "fresh" / "mlflow.db").stat().st_size > 0  # created, with its tables
    store.prepare(uri)  # ready: nothing said
    store.prepare("http://localhost:5000")  # a server's store is its own: nothing to prepare here
    assert len(said) == 1
