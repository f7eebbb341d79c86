"""The console in a real headless Chromium, against a live `berth up` stack.

The console runs as its own process (``python -m berth_console``) with the stack's URL and
the ``console`` user's seed; Chromium is Debian's (/usr/bin/chromium, driven through
/usr/bin/chromedriver: nothing is downloaded). Each page is saved as a screenshot under the
test's tmp_path and copied to /tmp/berth-console-shots/.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shared.auth import CredentialStore
from tests.conftest import FIXTURES, REPO, Stack, berth
from tests.e2e import (
    condition,
    eventually,
    get_json,
    is_admitted,
    job_manifest,
    submit_manifest,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = Path("/tmp/berth-console-shots")
TOKEN = "operator-token-for-tests"
SETUP = FIXTURES / "seed002-single-clusterqueue-setup.yaml"  # 9 CPUs, preempts by priority

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium at /usr/bin/chromium (and chromium-driver); .ci/run installs both",
)

if CHROMIUM.exists():
    from selenium import webdriver
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait


@dataclass
class Console:
    url: str
    process: subprocess.Popen[str]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(argument)
    assert CHROMEDRIVER.exists(), (
        "chromium is installed but chromium-driver is not (apt-get install chromium-driver)"
    )
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _console_seed(stack: Stack) -> Path | None:
    """The console's seed in the stack's creds (made, and NATS reloaded, if `berth up`
    made its credentials before the console user existed); None on an open bus."""
    creds = stack.data_dir / "creds"
    if not creds.is_dir():
        return None
    store = CredentialStore(creds)
    if not store.seed_path("console").exists():
        from berth_cli.creds import reload_nats

        store.ensure()
        reload_nats(creds)
    return store.seed_path("console")


@pytest.fixture
def console(stack: Stack) -> Iterator[Console]:
    """`python -m berth_console` on a free port; stopped with SIGTERM, which must be clean."""
    env = {k: v for k, v in os.environ.items() if k != "BERTH_CREDS"}  # conftest's admin seed
    seed = _console_seed(stack)
    if seed is not None:
        env["BERTH_CREDS"] = str(seed)
    env.update(BERTH_NATS_URL=stack.url, BERTH_CONSOLE_PORT="0", BERTH_CONSOLE_TOKEN=TOKEN)
    process = subprocess.Popen(
        [sys.executable, "-m", "berth_console"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 30)
        line = process.stdout.readline() if ready else ""
        assert line.startswith("Berth console: http://"), f"no URL printed: {line!r}"
        url = line.split(": ", 1)[1].strip().rstrip("/")
        eventually(lambda: _get_status(url + "/readyz") == 200)
        yield Console(url, process)
    finally:
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(15)
        assert code == 0, f"the console exited with {code}"
        assert time.monotonic() - started < 8, "the console took too long to stop"


def _get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def shoot(driver: WebDriver, folder: Path, name: str) -> None:
    (folder / "shots").mkdir(exist_ok=True)
    path = folder / "shots" / f"{name}.png"
    driver.save_screenshot(str(path))
    SHOTS.mkdir(exist_ok=True)
    shutil.copy(path, SHOTS / path.name)


def until(driver: WebDriver, check: Callable[[WebDriver], Any], timeout: float = 30) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(check)


def live(driver: WebDriver) -> None:
    """Wait until the page's event stream is open, then mark the page: a marker still there
    later proves the page was updated in place, not reloaded."""
    until(driver, lambda d: texts(d, "#live-status") == ["Live"])
    driver.execute_script("window.berthMarker = 'kept';")


def not_reloaded(driver: WebDriver) -> bool:
    return bool(driver.execute_script("return window.berthMarker === 'kept';"))


def texts(driver: WebDriver, selector: str) -> list[str]:
    """The text of every element ``selector`` finds, read in one go (a live region may be
    replaced between two WebDriver calls)."""
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => e.textContent.replace(/\\s+/g, ' ').trim());"
    )
    return list(driver.execute_script(script, selector))


def test_cluster_queue_page_then_a_live_admission(
    stack: Stack, console: Console, browser: WebDriver, tmp_path: Path
) -> None:
    """The queue page shows the quota bar and the pending workloads in admission order; a
    workload admitted after the page loaded appears on it without a reload."""
    url = stack.url
    berth("apply", "-f", str(SETUP), url=url)
    blocker = job_manifest(
        "blocker", cpu=9, priority_class="high-priority", simulated_runtime="600s"
    )
    submit_manifest(url, tmp_path, blocker)
    eventually(lambda: is_admitted(get_json(url, "workloads")[0]))
    for name, priority in (
        ("low-1", "low-priority"),
        ("low-2", "low-priority"),
        ("high-1", "high-priority"),
    ):
        submit_manifest(
            url,
            tmp_path,
            job_manifest(name, cpu=3, priority_class=priority, simulated_runtime="600s"),
        )
    order = eventually(
        lambda: (
            [
                line.split()[2]
                for line in berth("get", "pending", "cluster-queue", url=url).stdout.splitlines()[
                    1:
                ]
            ]
            if len(berth("get", "pending", "cluster-queue", url=url).stdout.splitlines()) == 4
            else None
        )
    )
    assert order == ["high-1", "low-1", "low-2"]  # priority first, then age

    browser.get(console.url + "/cq/cluster-queue")
    live(browser)
    shown = until(
        browser,
        lambda d: (
            (names := texts(d, "#pending td:nth-child(2)")) == [f"default/{n}" for n in order]
            and names
        ),
    )
    assert shown == ["default/high-1", "default/low-1", "default/low-2"]
    assert texts(browser, "#pending td:nth-child(1)") == ["0", "1", "2"]
    script = "return [...document.querySelectorAll('#quota svg.bar')].map(e => e.ariaLabel);"
    bars = browser.execute_script(script)
    assert "cpu in default-flavor: 9 of 9 in use, 0 borrowed, 0 lent" in bars
    shoot(browser, tmp_path, "cluster-queue-pending")

    berth("delete", "workload", "blocker", url=url)
    until(browser, lambda d: "default/high-1" in texts(d, "#admitted td:first-child"))
    until(browser, lambda d: texts(d, "#pending td") == ["Nothing pending."])
    assert not_reloaded(browser), "the page was reloaded"
    admitted = texts(browser, "#admitted td:first-child")
    assert sorted(admitted) == ["default/high-1", "default/low-1", "default/low-2"]
    shoot(browser, tmp_path, "cluster-queue-admitted")

    for name, path in (
        ("overview", "/"),
        ("workloads", "/workloads?status=Running"),
        ("workload", "/workloads/default/blocker"),
        ("events", "/events?cq=cluster-queue"),
    ):
        browser.get(console.url + path)
        live(browser)
        shoot(browser, tmp_path, name)
    # the feed fills from the event stream after the page is live: wait for the deletion
    until(browser, lambda d: "Deleted" in texts(d, "#feed .kind"))


def _task(folder: Path, name: str, *, cpus: int, priority: str, run: str) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nresources:\n  cpus: {cpus}\n  labels:\n"
        "    kueue.x-k8s.io/queue-name: user-queue\n"
        f"    kueue.x-k8s.io/priority-class: {priority}\nrun: |\n  {run}\n"
    )
    return str(path)


def _launch(url: str, task: str) -> int:
    return int(berth("jobs", "launch", task, url=url).stdout.split()[3])


def _job_cell(driver: WebDriver, column: int) -> str:
    cells = texts(driver, f"#row td:nth-child({column})")
    return cells[0] if cells else ""


def cancel_with(driver: WebDriver, token: str) -> None:
    """Type the token into the job page's cancel form and submit it, as an operator would
    (again if a live update replaced the form meanwhile)."""
    for _ in range(5):
        try:
            driver.find_element(By.NAME, "token").send_keys(token)
            driver.find_element(By.CSS_SELECTOR, "#actions button[type=submit]").click()
            return
        except StaleElementReferenceException:
            time.sleep(0.1)
    raise AssertionError("the cancel form kept being replaced")


def _post(url: str, data: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(data).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_preempted_managed_job_recovers_live_and_cancel_needs_the_token(
    stack: Stack, console: Console, browser: WebDriver, tmp_path: Path
) -> None:
    """A managed job's page shows RECOVERING, then RUNNING with #RECOVERIES 1, as a
    higher-priority job preempts it and finishes; a cancel without the token is refused,
    with it the job is cancelled."""
    url = stack.url
    berth("apply", "-f", str(SETUP), url=url)
    steps = 'for i in $(seq 1 16); do echo "low step $i"; sleep 0.5; done'
    low = _launch(url, _task(tmp_path, "low", cpus=6, priority="low-priority", run=steps))
    browser.get(f"{console.url}/jobs/{low}")
    live(browser)
    until(browser, lambda d: _job_cell(d, 8) == "RUNNING")
    until(browser, lambda d: "low step 2" in "".join(texts(d, "#logs")))
    high_run = 'for i in 1 2 3 4; do echo "high step $i"; sleep 0.5; done'
    _launch(url, _task(tmp_path, "high", cpus=6, priority="high-priority", run=high_run))

    until(browser, lambda d: (_job_cell(d, 8), _job_cell(d, 7)) == ("RECOVERING", "1"))
    shoot(browser, tmp_path, "job-recovering")
    until(browser, lambda d: (_job_cell(d, 8), _job_cell(d, 7)) == ("RUNNING", "1"))
    assert not_reloaded(browser), "the page was reloaded"
    history = texts(browser, "#history .badge")
    assert history[:4] == ["PENDING", "STARTING", "RUNNING", "RECOVERING"]
    runs = texts(browser, "#runs td")
    assert runs[2] == "2" and runs[3] == "run 1"  # two admissions of one attempt; run 1 preempted
    shoot(browser, tmp_path, "job-running-again")
    browser.get(console.url + "/jobs")
    live(browser)
    shoot(browser, tmp_path, "jobs")

    sleeper = _launch(
        url, _task(tmp_path, "sleeper", cpus=1, priority="low-priority", run="sleep 600")
    )
    browser.get(f"{console.url}/jobs/{sleeper}")
    live(browser)
    until(browser, lambda d: _job_cell(d, 8) == "RUNNING")
    assert _post(f"{console.url}/jobs/{sleeper}/cancel", {}) == 403
    assert _post(f"{console.url}/jobs/{sleeper}/cancel", {"token": "guess"}) == 403
    cancel_with(browser, "guess")
    until(browser, lambda d: texts(d, "h1") == ["Refused"])
    shoot(browser, tmp_path, "cancel-refused")
    assert get_status(url, sleeper) == "RUNNING"

    browser.get(f"{console.url}/jobs/{sleeper}")
    live(browser)
    cancel_with(browser, TOKEN)
    until(browser, lambda d: "Cancel requested" in "".join(texts(d, "#main .notice")))
    until(browser, lambda d: _job_cell(d, 8) == "CANCELLED")
    shoot(browser, tmp_path, "cancelled")


def get_status(url: str, job_id: int) -> str:
    import json

    jobs = json.loads(berth("jobs", "queue", "-o", "json", url=url).stdout)
    return str(next(job["status"] for job in jobs if job["id"] == job_id))


def _workload(url: str, name: str) -> dict[str, Any]:
    return next(item for item in get_json(url, "workloads") if item["metadata"]["name"] == name)


def _cluster_queue(url: str) -> dict[str, Any]:
    return get_json(url, "clusterqueues")[0]


def _queue_action(driver: WebDriver, token: str, button: str) -> None:
    """Type the token into the queue page's form and press ``button`` (#stop-queue or
    #resume-queue), again if a live update replaced the form meanwhile (or was replacing it:
    not there for a moment)."""
    for _ in range(20):
        try:
            driver.find_element(By.CSS_SELECTOR, "#queue-actions input[name=token]").send_keys(
                token
            )
            driver.find_element(By.CSS_SELECTOR, button).click()
            return
        except (StaleElementReferenceException, NoSuchElementException):
            time.sleep(0.1)
    raise AssertionError("the queue form kept being replaced")


def test_stop_then_resume_a_cluster_queue_from_its_page(
    stack: Stack, console: Console, browser: WebDriver, tmp_path: Path
) -> None:
    """Issue 17: without the token a stop is refused and nothing changes; with it, the
    ClusterQueue is stopped (HoldAndDrain: its running workload is evicted, a new one waits,
    `berth get clusterqueues` shows it inactive), then resumed (both are admitted again)."""
    url = stack.url
    berth("apply", "-f", str(SETUP), url=url)
    runner = job_manifest("runner", cpu=3, simulated_runtime="600s")
    submit_manifest(url, tmp_path, runner)
    eventually(lambda: is_admitted(_workload(url, "runner")))

    assert _post(f"{console.url}/cq/cluster-queue/stop", {}) == 403
    assert _post(f"{console.url}/cq/cluster-queue/stop", {"token": "guess"}) == 403
    assert "stopPolicy" not in _cluster_queue(url)["spec"], "a refused stop wrote nothing"

    browser.get(console.url + "/cq/cluster-queue")
    live(browser)
    _queue_action(browser, TOKEN, "#stop-queue")
    until(browser, lambda d: "Queue stopped (HoldAndDrain)" in "".join(texts(d, "#main .notice")))
    eventually(lambda: _cluster_queue(url)["spec"].get("stopPolicy") == "HoldAndDrain")
    active = eventually(
        lambda: (
            condition(_cluster_queue(url), "Active")
            if condition(_cluster_queue(url), "Active")["status"] == "False"  # type: ignore[index]
            else None
        )
    )
    assert "Stop" in active["reason"] + active["message"], active
    evicted = eventually(
        lambda: (
            condition(_workload(url, "runner"), "Evicted")
            if not is_admitted(_workload(url, "runner"))
            else None
        )
    )
    assert evicted is not None and evicted["reason"] == "ClusterQueueStopped", evicted
    submit_manifest(url, tmp_path, job_manifest("newcomer", cpu=1, simulated_runtime="600s"))
    waiting = eventually(lambda: condition(_workload(url, "newcomer"), "QuotaReserved"))
    assert waiting["status"] == "False", waiting
    until(browser, lambda d: "HoldAndDrain" in "".join(texts(d, "#facts dd")))
    shoot(browser, tmp_path, "cluster-queue-stopped")

    _queue_action(browser, TOKEN, "#resume-queue")
    until(browser, lambda d: "Queue resumed" in "".join(texts(d, "#main .notice")))
    eventually(lambda: is_admitted(_workload(url, "newcomer")))
    eventually(lambda: is_admitted(_workload(url, "runner")))
    assert "stopPolicy" not in _cluster_queue(url)["spec"]
    shoot(browser, tmp_path, "cluster-queue-resumed")
