"""Headless Chromium on the Arms race page of a synthetic population and baseline that evaluate during training:
the "Benchmarks during training" charts draw in a real browser, and a screenshot is saved (copied to
``docs/screenshots/arms_race_eval.png`` with ``POPULORA_UPDATE_SCREENSHOTS=1``).

Needs Debian ``chromium`` + ``chromium-driver`` (``scripts/install-browser.sh``) and ``selenium``; skips otherwise."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic", "--window-size=1400,1100"]

pytestmark = [
    pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                       reason="headless browser test needs Debian chromium + chromium-driver: run scripts/install-browser.sh"),
    pytest.mark.timeout(300),
]
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path: Path, uri: str):
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "POPULORA_JOBS_DIR": str(tmp_path / "jobs")}
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "populora.ui.cli", "--port", str(port)], cwd=tmp_path, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200:
                return proc, log, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail(f"the UI did not start: {(tmp_path / 'server.log').read_text()[-2000:]}")


def test_arms_race_eval_curves_in_a_browser(tmp_path):
    import synthetic_store
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from populora.platform.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    baseline = synthetic_store.make_run(tracker, "baseline", 1, 12, 6, baseline=True, seed=5, eval_every=1, skill=0.25)
    population = synthetic_store.make_run(tracker, "population", 4, 12, 6, baseline_run=baseline, seed=6,
                                          eval_every=1, skill=0.3)
    proc, log, url = _serve(tmp_path, uri)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tempfile.mkdtemp(prefix='populora-chromium-')}"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.set_page_load_timeout(60)
        driver.get(f"{url}/arms_race?run={population}")
        text = lambda: driver.find_element(By.TAG_NAME, "body").text  # noqa: E731
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
    finally:
        driver.quit()
        os.killpg(proc.pid, 2)
        proc.wait(timeout=20)
        log.close()
