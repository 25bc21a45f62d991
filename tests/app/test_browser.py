"""The web app in a real browser: ``streamlit run app.py`` headless, driven by Playwright with the
system Chromium (no ``playwright install``).

Skipped when playwright is not importable or no chromium executable is found. Every page is
screenshotted into a temporary folder, or into ``docs/img/<page>.png`` with
``UPDATE_SCREENSHOTS=1`` (the README's images).
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest

pytest.importorskip("streamlit")
sync_api = pytest.importorskip("playwright.sync_api")
PlaywrightTimeoutError = sync_api.TimeoutError

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
DONE = "[data-testid='stApp'][data-test-script-state='notRunning']"
CONNECTED = "[data-testid='stApp'][data-test-connection-state='CONNECTED']"
ERRORS = "[data-testid='stException'], [data-testid='stAlertContentError']"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
]
WIDTH, HEIGHT = 1400, 2200  # tall: Streamlit scrolls an inner container, not the page
MAX_SHOT_HEIGHT = 6000
GENERATIONS = ("A100", "H100", "H200", "B200", "GB200", "MI300X")


def chromium_path() -> str | None:
    """The system Chromium: ``chromium`` or ``chromium-browser`` on PATH, else
    /usr/bin/chromium; None when there is none."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    fallback = Path("/usr/bin/chromium")
    return str(fallback) if fallback.is_file() and os.access(fallback, os.X_OK) else None


CHROMIUM = chromium_path()
if CHROMIUM is None:
    pytest.skip("no chromium executable found", allow_module_level=True)


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    """Whether Streamlit's ``/_stcore/health`` answers 200."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``streamlit run app.py`` on a free port (own process group); its URL once healthy."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 60.0
            while not _healthy(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "streamlit did not become healthy: " + log_path.read_text(errors="replace")
                    )
                time.sleep(0.2)
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless system Chromium."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (own session) with a tall viewport."""
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(60_000)
    sync_api.expect.set_options(timeout=30_000)  # a loaded CI machine renders slowly
    yield context.new_page()
    context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: docs/img with UPDATE_SCREENSHOTS=1, else a temporary folder."""
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        out = ROOT / "docs" / "img"
        out.mkdir(parents=True, exist_ok=True)
        return out
    return tmp_path_factory.mktemp("screenshots")


# ---- helpers ------------------------------------------------------------------------------------
def wait_for_app(page: Page, timeout_s: float = 60.0) -> None:
    """Wait until the app is connected and its script has finished (as Streamlit's own e2e
    suite does), after a short pause so a rerun just triggered has started."""
    page.wait_for_timeout(300)
    page.wait_for_selector(CONNECTED, timeout=timeout_s * 1000)
    page.wait_for_selector(DONE, timeout=timeout_s * 1000)


def open_page(page: Page, url: str, timeout_s: float = 60.0) -> None:
    """Load ``url`` and wait for its first script run to finish: every page starts with
    ``st.title``, so an ``h1`` means that run has begun (before it, the app reads as not
    running too)."""
    page.goto(url)
    page.wait_for_selector(CONNECTED, timeout=timeout_s * 1000)
    page.locator("[data-testid='stMain'] h1").first.wait_for(timeout=timeout_s * 1000)
    wait_for_app(page, timeout_s)


def select(page: Page, label: str, option: str) -> None:
    """Pick ``option`` in the selectbox labelled ``label`` and wait for the rerun."""
    box = page.get_by_test_id("stSelectbox").filter(has_text=label).first
    box.locator("input").click()
    page.get_by_role("option", name=option, exact=True).click()
    wait_for_app(page)


WATCH_RERUN = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  // one watcher at a time: an earlier call's watcher would otherwise still be listening
  if (window.__rerunWatcher) window.__rerunWatcher.disconnect();
  window.__rerunDone = false;
  // the user's side of the change: from the pointer pressing the option (capture phase, before
  // the widget sees it) to the rerun's end, on the page's own clock; Playwright's RPC for the
  // click is not in it
  window.__pressedAt = null;
  window.__doneAt = null;
  document.addEventListener("pointerdown", () => {
    if (window.__pressedAt === null) window.__pressedAt = performance.now();
  }, { capture: true, once: true });
  let ran = false;
  // a quick rerun can flip the state to running and back before the callback runs: the
  // records' old values still show that it ran
  window.__rerunWatcher = new MutationObserver((records) => {
    if (records.some((r) => r.oldValue === "running")) ran = true;
    const state = app.dataset.testScriptState;
    if (state === "running") ran = true;
    else if (ran && state === "notRunning" && !window.__rerunDone) {
      window.__doneAt = performance.now();
      window.__rerunDone = true;
    }
  });
  window.__rerunWatcher.observe(app, {
    attributes: true,
    attributeOldValue: true,
    attributeFilter: ["data-test-script-state"],
  });
}"""


class Change(NamedTuple):
    """One timed widget change, seconds: ``wall`` from the test asking Playwright to click
    until it saw the rerun end (Playwright's click and polling round trips included), and
    ``in_page`` from the pointer pressing the option until the rerun ended, both read on the
    page's clock (what the user waits)."""

    wall: float
    in_page: float | None


def widget_change_s(page: Page, label: str, option: str) -> Change | None:
    """The times from picking ``option`` in the selectbox ``label`` until the rerun it starts
    has finished in the browser (a measurement, printed, never asserted). None when the
    browser showed no rerun to time (a busy host can merge or miss one); the pick itself is
    then checked and, if it did not take, made again."""
    box = page.get_by_test_id("stSelectbox").filter(has_text=label).first
    box.locator("input").click()
    choice = page.get_by_role("option", name=option, exact=True)
    choice.wait_for()
    page.evaluate(WATCH_RERUN)
    started = time.monotonic()
    choice.click()
    try:
        page.wait_for_function("() => window.__rerunDone", polling="raf", timeout=30_000)
        wall = time.monotonic() - started
        marks = page.evaluate("() => [window.__pressedAt, window.__doneAt]")
        in_page = None if None in marks else (marks[1] - marks[0]) / 1000.0
        seconds: Change | None = Change(wall, in_page)
    except PlaywrightTimeoutError:
        seconds = None
    wait_for_app(page)
    if seconds is None and box.locator("input").input_value() != option:
        select(page, label, option)
    sync_api.expect(box.locator("input")).to_have_value(option)
    return seconds


def open_expander(page: Page, title: str) -> None:
    """Expand the expander titled ``title`` and wait for the rerun it triggers."""
    page.get_by_test_id("stExpander").filter(has_text=title).locator("summary").click()
    wait_for_app(page)


def metric_value(page: Page, label: str) -> str:
    """The value of the metric labelled ``label``."""
    metric = page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").filter(has_text=label)
    )
    return metric.first.get_by_test_id("stMetricValue").inner_text()


def assert_no_errors(page: Page) -> None:
    """No exception box and no error alert on the page."""
    errors = page.locator(ERRORS)
    assert errors.count() == 0, errors.all_inner_texts()


SETTLED = """() => {
  const all = (sel, inner) =>
    [...document.querySelectorAll(sel)]
      .filter((el) => el.checkVisibility())  // skip those in closed expanders, hidden tabs
      .every((el) => el.querySelector(inner) !== null);
  return all("[data-testid='stDataFrame']", "canvas")
    && all("[data-testid='stPlotlyChart']", ".main-svg")
    && all("[data-testid='stVegaLiteChart']", "canvas, svg");
}"""
CONTENT_HEIGHT = """() => {
  const main = document.querySelector("[data-testid='stMain']");
  const block = document.querySelector("[data-testid='stMainBlockContainer']");
  return Math.ceil(block.getBoundingClientRect().top + main.scrollTop + block.scrollHeight);
}"""


def settle(page: Page) -> None:
    """Wait until every visible table has its canvas and every visible chart its SVG, then
    for them to paint."""
    page.wait_for_function(SETTLED)
    page.wait_for_timeout(700)


def screenshot(page: Page, path: Path) -> None:
    """The whole page: the viewport fitted to the main container's content (Streamlit scrolls
    that container, so ``full_page`` would cut it), scrolled to the top, once painted."""
    for _ in range(2):  # a resize can re-flow the content once
        settle(page)
        height = min(max(int(page.evaluate(CONTENT_HEIGHT)), 900), MAX_SHOT_HEIGHT)
        if page.viewport_size == {"width": WIDTH, "height": height}:
            break
        page.set_viewport_size({"width": WIDTH, "height": height})
    page.evaluate("() => document.querySelector(\"[data-testid='stMain']\").scrollTo(0, 0)")
    settle(page)
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000


# ---- tests --------------------------------------------------------------------------------------
def test_estimate_picks_model_and_cluster(
    page: Page, app_url: str, shots: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    open_page(page, app_url)
    sync_api.expect(page.get_by_test_id("stMetricLabel").filter(has_text="MFU")).to_be_visible()
    seconds = time.monotonic() - started
    with capsys.disabled():  # a measurement, printed for the log, never asserted
        print(f"\nfirst page (Estimate) rendered in {seconds:.2f} s after the server was up")
    sync_api.expect(page.locator(".st-key-est_gpus input")).to_have_value("8")
    before = metric_value(page, "Tokens/s")
    select(page, "Model", "llama2-13b")
    # five cluster changes, back and forth, ending on dgx-h200: the median is the figure
    changes = [
        widget_change_s(page, "Cluster", "dgx-h200" if i % 2 == 0 else "dgx-h100") for i in range(5)
    ]
    with capsys.disabled():
        for name, field in (("in the page", "in_page"), ("Playwright's wall clock", "wall")):
            times = [None if c is None else getattr(c, field) for c in changes]
            timed = [t for t in times if t is not None]
            each = ", ".join("not seen" if t is None else f"{t * 1000:.0f}" for t in times)
            median = f"{statistics.median(timed) * 1000:.0f} ms" if timed else "not timed"
            print(
                f"\nEstimate widget change (cluster) answered in {median}, {name} "
                f"(median of {each} ms)"
            )
    main = page.get_by_test_id("stMain")
    sync_api.expect(main).to_contain_text("H200")
    open_expander(page, "Details")  # drawn only when open: names the model and the cluster
    sync_api.expect(main).to_contain_text("llama2-13b")
    sync_api.expect(page.get_by_test_id("stMetricLabel").filter(has_text="MFU")).to_be_visible()
    assert metric_value(page, "MFU").endswith("%")
    tokens = page.get_by_test_id("stMetricValue").first  # the Tokens/s metric
    sync_api.expect(tokens).not_to_have_text(before)
    sync_api.expect(page.get_by_test_id("stVegaLiteChart")).to_have_count(2)
    sync_api.expect(page.get_by_test_id("stPlotlyChart")).to_have_count(0)
    open_expander(page, "Step timeline")
    sync_api.expect(page.get_by_test_id("stPlotlyChart")).to_have_count(1)
    open_expander(page, "Goodput under failures and checkpoints")
    sync_api.expect(page.get_by_test_id("stMetricLabel").filter(has_text="Goodput")).to_be_visible()
    assert metric_value(page, "Goodput").endswith("%")
    open_expander(page, "Levers")
    levers = page.get_by_test_id("stExpander").filter(has_text="Levers")
    sync_api.expect(levers.get_by_test_id("stDataFrame")).to_be_visible()
    assert_no_errors(page)
    screenshot(page, shots / "estimate.png")


def test_compare_lists_generations(
    page: Page, app_url: str, shots: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    open_page(page, f"{app_url}/compare", timeout_s=120.0)
    sync_api.expect(page.get_by_test_id("stDataFrame")).to_be_visible(timeout=120_000)
    seconds = time.monotonic() - started
    with capsys.disabled():  # a measurement, printed for the log, never asserted
        print(f"\nCompare page loaded, six generations searched, in {seconds:.2f} s")
    assert_no_errors(page)
    # the table is drawn on a canvas: read it through its CSV download
    with page.expect_download() as download:
        page.get_by_test_id("stDownloadButton").get_by_role("button").click()
    rows = list(csv.DictReader(Path(download.value.path()).read_text().splitlines()))
    accelerators = " ".join(row["accelerator"] for row in rows if row["tokens/s"]).upper()
    assert sum(name in accelerators for name in GENERATIONS) >= 4, accelerators
    # and the four charts are drawn (their data: tests/app/test_app.py)
    sync_api.expect(page.get_by_test_id("stVegaLiteChart")).to_have_count(4)
    screenshot(page, shots / "compare.png")
    # another model: the six generations searched again inside the loaded app
    again = widget_change_s(page, "Model", "llama3.1-8b")
    with capsys.disabled():
        answered = "no rerun seen to time" if again is None else f"{again.wall:.2f} s"
        print(f"Compare page, model changed: six generations answered in {answered}")
    assert_no_errors(page)
    sync_api.expect(page.get_by_test_id("stVegaLiteChart")).to_have_count(4)


def test_search_runs(page: Page, app_url: str, shots: Path) -> None:
    open_page(page, f"{app_url}/search")
    # the widgets are lazily loaded components: submit only once the form shows its values
    sync_api.expect(page.locator(".st-key-srch_gpus input")).to_have_value("16")
    page.locator(".st-key-srch_submit button").click()
    wait_for_app(page, 120.0)
    sync_api.expect(page.get_by_test_id("stMetricLabel").filter(has_text="MFU")).to_be_visible()
    sync_api.expect(page.get_by_test_id("stPlotlyChart")).to_have_count(2)  # Pareto fronts
    assert_no_errors(page)
    screenshot(page, shots / "search.png")


@pytest.mark.parametrize("name", ["validation", "calibration"])
def test_page_renders(page: Page, app_url: str, shots: Path, name: str) -> None:
    open_page(page, f"{app_url}/{name}")
    sync_api.expect(page.locator("h1")).to_contain_text(name.capitalize())
    assert_no_errors(page)
    screenshot(page, shots / f"{name}.png")
