"""Headless Chromium on the Arms race page of a synthetic population and baseline that evaluate during training:
the "Benchmarks during training" charts draw in a real browser, and a screenshot is saved (copied to
``docs/screenshots/arms_race_eval.png`` with ``POPULORA_UPDATE_SCREENSHOTS=1``).

Needs Debian ``chromium`` + ``chromium-driver`` (``scripts/install-browser.sh``) and ``selenium``; skips otherwise."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from conftest import wait_for
from headless import NEEDS_CHROMIUM, ROOT, chromium, page_text, ui_server

pytestmark = [NEEDS_CHROMIUM, pytest.mark.timeout(300)]
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")


def test_arms_race_eval_curves_in_a_browser(tmp_path):
    import synthetic_store
    from selenium.webdriver.common.by import By

    from populora.platform.store.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    baseline = synthetic_store.make_run(tracker, "baseline", 1, 12, 6, baseline=True, seed=5, eval_every=1, skill=0.25)
    population = synthetic_store.make_run(tracker, "population", 4, 12, 6, baseline_run=baseline, seed=6,
                                          eval_every=1, skill=0.3)
    with ui_server(tmp_path, uri) as server, chromium(window="1400,1100", page_load_timeout=60) as driver:
        driver.get(f"{server['url']}/arms_race?run={population}")
        text = lambda: page_text(driver)  # noqa: E731
        wait_for(lambda: "Benchmarks during training" in text() and "Running..." not in text(), 90,
                 "the eval curves", detail=lambda: text()[-1500:])
        heading = next(h for h in driver.find_elements(By.CSS_SELECTOR, "h3") if "Benchmarks during training" in h.text)
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", heading)
        time.sleep(3)  # Vega draws after the script finishes
        assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        charts = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stVegaLiteChart"], .vega-embed')
        assert len(charts) >= 6, "headline charts plus one per benchmark of the subset"
        assert "fixed subset" in text() and "humaneval_plus, gsm8k, 20 items each" in text()
        shot = tmp_path / "arms_race_eval.png"
        driver.save_screenshot(str(shot))
        if os.environ.get("POPULORA_UPDATE_SCREENSHOTS") == "1":
            shutil.copy(shot, ROOT / "docs" / "screenshots" / shot.name)
