"""What the headless-browser tests share: ``populora ui`` served on a store in a fresh working dir, headless
Chromium, and waiting for a page's text.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``scripts/install-browser.sh``) and ``selenium``:
a test module marks itself with ``NEEDS_CHROMIUM`` and calls ``pytest.importorskip("selenium.webdriver")``, so it
skips with the reason when they are missing (selenium is imported here only inside the functions that drive it).
"""

from __future__ import annotations

import contextlib
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

from populora.platform.jobs import jobs

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"
# The last five cut Chromium's CPU by a quarter (process sampling over a whole test: the browser flow 78 -> 58 s,
# the baseline flow 36 -> 26 s): no animations (Streamlit's spinners and transitions repaint while a page reruns),
# one renderer process for the one local origin the tests open, no extensions, no smooth scrolling.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic", "--force-prefers-reduced-motion",
         "--disable-extensions", "--disable-smooth-scrolling", "--renderer-process-limit=1", "--disable-site-isolation-trials"]
# the fields the browser tests fill: the launch form's run name, the evaluation form's benchmark picker and limit
NAME, PICKER, LIMIT = 'input[aria-label="name"]', '[data-testid="stMultiSelect"] input', 'input[aria-label^="limit"]'
NEEDS_CHROMIUM = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="headless browser test needs Debian chromium + chromium-driver: run scripts/install-browser.sh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def ui_server(tmp_path: Path, uri: str | None = None, env: dict[str, str] | None = None, start_timeout: float = 60):
    """``populora ui`` in ``tmp_path`` (its cwd and jobs dir), on the MLflow store ``uri`` (default: a fresh one
    there), with ``env`` added to the environment; yields {"url", "dir"}. On the way out every job it launched is
    stopped (never a training process left behind) and the server ends."""
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri or f"sqlite:///{tmp_path / 'mlflow.db'}",
           "POPULORA_JOBS_DIR": str(tmp_path / "jobs"), **(env or {})}
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "populora.ui.cli", "--port", str(port)], cwd=tmp_path, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200
        except OSError:
            return False

    try:
        wait_for(healthy, start_timeout, "the UI server to start",
                 detail=lambda: f"; its log:\n{(tmp_path / 'server.log').read_text()[-2000:]}")
        yield {"url": url, "dir": tmp_path}
    finally:
        for job in jobs.list_jobs(tmp_path / "jobs"):
            jobs.stop(job, timeout_s=10)
        os.killpg(proc.pid, 2)
        proc.wait(timeout=20)
        log.close()


@contextlib.contextmanager
def chromium(window: str = "1400,1500", page_load_timeout: float = 60):
    """A headless Chromium (its own fresh profile dir, ~24 MB, removed after) with a ``window`` of "width,height";
    quit on the way out."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="populora-chromium-")
    for flag in FLAGS + [f"--window-size={window}", f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        try:
            driver.set_page_load_timeout(page_load_timeout)
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def page_text(driver) -> str:
    """The page's rendered text: the body's ``innerText``, one line per table cell (as WebDriver's text puts them),
    non-breaking spaces as spaces, lines stripped, blank ones dropped. Not WebDriver's ``element.text``: its
    JavaScript visibility walk cost the browser ~0.8 s of CPU (~6 s of wall at load 20) per call on the Launch
    page (innerText: ~0.005 s, 0.08 s), and the tests poll the page's text every half second while they wait."""
    text = driver.execute_script("return document.body.innerText")
    lines = (line.strip() for line in text.replace("\xa0", " ").replace("\t", "\n").splitlines())
    return "\n".join(line for line in lines if line)


def wait_on_page(driver, predicate, timeout: float, what: str):
    """``conftest.wait_for``, its failure showing the end of the page's text."""
    return wait_for(predicate, timeout, what, detail=lambda: f"; page text:\n{page_text(driver)[-1500:]}")


def drawn_form(driver, button: str, text: str = "", fields: tuple[str, ...] = ()):
    """The page's form that shows its ``button`` (a submit button: a form's last widget), ``text`` and an element
    for each CSS selector of ``fields``; None until then, and while a rerun replaces the element being read. (A
    form's frame shows before its widgets: a test that read it once found its first row only; and CI once found a
    launch form's button but not yet its name field, on a loaded machine: so the fields a test fills are waited
    for too.) ``form.text`` (WebDriver's costly visibility walk, see page_text) is read only when ``text`` is given."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        for form in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stForm"]'):
            if ((not text or text in form.text) and form.find_elements(By.XPATH, f".//button[.//p[normalize-space()='{button}']]")
                    and all(form.find_elements(By.CSS_SELECTOR, css) for css in fields)):
                return form
        return None
    except StaleElementReferenceException:
        return None


def settle(driver, quiet: float = 0.75, at_most: float = 2.5) -> None:
    """Wait until the page stops changing (its number of elements, and of charts and drawings, the same for
    ``quiet`` seconds), at most ``at_most`` seconds: what charts and the graphviz layout take to draw after the
    script ends (a fixed 2.5 s before; 0.8-2.5 s, ~1.7 s on average, in the
    browser test)."""
    def shape():
        return driver.execute_script("return [document.getElementsByTagName('*').length, "
                                     "document.querySelectorAll('svg, canvas, img').length]")

    deadline, last, since = time.time() + at_most, shape(), time.time()
    while time.time() < deadline and time.time() - since < quiet:
        time.sleep(0.25)
        now = shape()
        if now != last:
            last, since = now, time.time()


def open_page(driver, url: str, ready_text: str, shots: Path, name: str | None = None) -> None:
    """Load ``url``, wait until the page shows ``ready_text`` and its script has finished, fail on any exception
    box on the page; with ``name``, save a screenshot ``<shots>/<name>.png``."""
    from selenium.webdriver.common.by import By

    driver.get(url)
    wait_on_page(driver, lambda: ready_text in page_text(driver) and "Running..." not in page_text(driver), 60,
                 f"{ready_text!r} at {url}")
    settle(driver)  # charts and the graphviz layout draw after the script finishes
    errors = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not errors, f"{url}: {[e.text[:500] for e in errors]}"
    if name:
        driver.save_screenshot(str(shots / f"{name}.png"))


def button(driver, label: str, within=None):
    """The first button labelled ``label`` (in ``within``, else anywhere on the page), or None."""
    from selenium.webdriver.common.by import By

    found = (within or driver).find_elements(By.XPATH, f"{'.' if within else ''}//button[.//p[normalize-space()='{label}']]")
    return found[0] if found else None


def click(driver, element) -> None:
    """Scroll ``element`` to the middle of the window (a click outside it misses), then click it."""
    assert element is not None, "nothing to click: the element is not on the page (wait for it: press)"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()


def press(driver, label: str, timeout: float = 60, within=None) -> None:
    """Click the button labelled ``label`` once it is drawn, shown and enabled: a page's text (what ``open_page``
    waits for) can show before its buttons (a loaded machine once drew "Stopped at step" a moment before the Resume
    button), and a rerun may redraw a button between finding and clicking it (on a loaded machine, "Fork from here"
    once read "element not interactable"): then the button drawn next is clicked. An exception means no click was
    delivered, so a retry never clicks twice."""
    from selenium.common.exceptions import (ElementClickInterceptedException, ElementNotInteractableException,
                                            StaleElementReferenceException)

    def pressed() -> bool:
        try:
            element = button(driver, label, within)
            if element is None or not (element.is_displayed() and element.is_enabled()):
                return False
            click(driver, element)
        except (ElementClickInterceptedException, ElementNotInteractableException, StaleElementReferenceException):
            return False
        return True

    wait_on_page(driver, pressed, timeout, f"the {label!r} button to take a click")


def fill_eval_form(driver, form, benchmarks: list[str], limit: int, max_new_tokens: int | None = None) -> None:
    """Compare's evaluation ``form`` (``drawn_form(driver, "Launch evaluation", fields=(PICKER, LIMIT))``): the
    ``benchmarks`` instead of the default "all", ``limit`` items each and, in "advanced", ``max_new_tokens``; the
    caller presses its button."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    picker = form.find_element(By.CSS_SELECTOR, PICKER)
    click(driver, picker)
    picker.send_keys(Keys.BACKSPACE)  # drops the default "all"
    for name in benchmarks:
        picker.send_keys(name, Keys.ENTER)
    picker.send_keys(Keys.ESCAPE)
    field = form.find_element(By.CSS_SELECTOR, LIMIT)
    field.send_keys(Keys.CONTROL, "a")  # clear() does not reach Streamlit's React state
    field.send_keys(Keys.BACKSPACE, str(limit), Keys.TAB)
    if max_new_tokens is None:
        return
    click(driver, form.find_element(By.XPATH, ".//summary[.//p[starts-with(normalize-space(), 'advanced')]]"))
    tokens = wait_on_page(driver, lambda: next(iter(form.find_elements(By.CSS_SELECTOR, 'input[aria-label="max_new_tokens"]')), None),
                          30, "the max_new_tokens field")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", tokens)
    tokens.send_keys(Keys.CONTROL, "a")
    tokens.send_keys(Keys.BACKSPACE, str(max_new_tokens), Keys.TAB)


def fill_fork_form(driver, url: str, run_id: str, step: int, settings: str, shots: Path) -> None:
    """The Runs page's "Fork from a checkpoint" form of ``run_id`` at its checkpoint ``step``, with ``settings``
    (``key=value`` lines) typed in; the caller waits for the diff or resize it expects, then presses "Fork from
    here"."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_page(driver, f"{url}/?run={run_id}&fork={step}", "Fork from a checkpoint", shots)
    area = wait_on_page(driver, lambda: next(iter(driver.find_elements(By.CSS_SELECTOR, 'textarea[aria-label^="settings to change"]')), None),
                        60, "the fork form")
    click(driver, area)
    area.send_keys(settings, Keys.TAB)  # a text area's value reaches the app when it loses the focus
