"""`reinloop inspect` in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`, which
scripts/test.sh installs) drives the served page over a thread ended by a breaker, resumes it from the page and
sees it answered through the page's live updates."""

import shutil
import threading
import time

import pytest

from tests.inspect.test_inspect import command, free_port
from tests.openai_server import ScriptedOpenAIServer

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)
# How long the page may take to show what the server did (it polls every 1.5 s).
SHOWN_WITHIN_S = 30


class SlowServer(ScriptedOpenAIServer):
    """A scripted model that takes `delay_s` to answer: a resumed run is still running when its page loads."""

    delay_s = 0.0

    def _completion(self, body):
        time.sleep(self.delay_s)
        return super()._completion(body)


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1300,1000"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def served(tmp_path):
    """`reinloop inspect --allow-actions` over a database with a thread ended by max_iterations, served by
    uvicorn on a free port; the scripted model server its runs use."""
    import uvicorn

    from reinloop.inspect import inspect_app

    with SlowServer() as model:
        (tmp_path / "ws").mkdir()
        db = str(tmp_path / "runs.sqlite")
        model.replies = [{"tool": "calculator", "args": {"expression": f"{n} + 1"}} for n in range(2)]
        options = ["--base-url", model.base_url, "--no-memory", "--quiet", "--workspace", str(tmp_path / "ws")]
        assert command("run", "Count up.", "--thread", "broken", "--max-iterations", "2", "--db", db, *options) == 3
        port = free_port()
        config = uvicorn.Config(inspect_app(db, allow_actions=True, no_memory=True), port=port, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        _wait_until(lambda: server.started, "the server did not start")
        try:
            yield f"http://127.0.0.1:{port}", model
        finally:
            server.should_exit = True
            thread.join(10)


def test_the_page_shows_a_break_and_resumes_it_until_answered(browser, served):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, model = served
    browser.get(url)
    browser.find_element(By.LINK_TEXT, "broken").click()
    assert browser.find_element(By.ID, "finish-reason").text == "max_iterations"
    timeline = browser.find_element(By.ID, "timeline").text
    assert "round 1" in timeline and "round 2" in timeline and "calculator" in timeline
    assert "FINISH: MAX_ITERATIONS" in timeline.upper() and "Stopped: no final answer after 2 rounds" in timeline
    assert "stopped" in browser.find_element(By.ID, "node_circuit_break").get_attribute("class")
    assert "visited" in browser.find_element(By.ID, "node_decide").get_attribute("class")

    model.replies, model.delay_s = ["Counted to 2."], 2.0
    extra = browser.find_element(By.ID, "extra-iterations")
    extra.clear()
    extra.send_keys("3")
    browser.find_element(By.ID, "hint").send_keys("Stop counting now.")
    browser.find_element(By.ID, "resume").click()

    # The page redraws its body while the run goes on: an element found may be replaced before it is read.
    wait = WebDriverWait(
        browser, SHOWN_WITHIN_S, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
    )
    wait.until(lambda page: "resume from this page running" in page.find_element(By.ID, "job").text)
    browser.execute_script("window.notReloaded = true")
    wait.until(lambda page: page.find_element(By.ID, "finish-reason").text == "answered")
    # Once the job is done too, the body stops changing.
    wait.until(lambda page: "resume from this page done: answered" in page.find_element(By.ID, "job").text)
    assert browser.execute_script("return window.notReloaded") is True  # the page redrew itself in place
    assert "Counted to 2." in browser.find_element(By.ID, "timeline").text
    assert "stopped" in browser.find_element(By.ID, "node___end__").get_attribute("class")
    assert "Stop counting now." in str(model.requests[-1]["messages"])  # the hint reached the model


def _wait_until(condition, message: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.05)
