"""Browser-level check of the noise explorer: headless Chromium drives JupyterLab, the explorer widget
renders, and a prediction typed into it is scored by the verifier and the reveal appears.

Marked ``browser``; skipped unless Debian's Chromium (``/usr/bin/chromium``) and the ``playwright``
Python package are installed (no browser download: Playwright drives the system Chromium). CI
installs both in ``.ci/run``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

CHROMIUM = os.environ.get("EHRGYM_CHROMIUM", "/usr/bin/chromium")
TOKEN = "ehrgym-browser-test"

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def playwright_api():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install playwright; no browser download needed)")
    return sync_playwright


@pytest.fixture(scope="module")
def lab(playwright_api, tmp_path_factory: pytest.TempPathFactory, synth_db: Path):
    """A JupyterLab server over a folder holding a notebook that opens the explorer on a tiny benchmark."""
    import jupyterlab

    from ehrgym import explore, lesson
    from ehrgym.bench.build import build_benchmark
    from ehrgym.bench.configs import BuildConfig

    root = tmp_path_factory.mktemp("lab")
    bench = root / "bench"
    build_benchmark(synth_db, bench, config=BuildConfig("tiny", 12, oversample=4.0, min_candidates=8), seed=2,
                    progress=False)
    with explore.NoiseExplorer(synth_db, bench) as ex:
        _, noise = ex.pair(ex.pairs()["pair_id"].iloc[0])      # the pair the explorer opens on
        key = lesson.protocol_line(noise)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"from ehrgym import explore\nex = explore.NoiseExplorer({str(synth_db)!r}, {str(bench)!r})\n"
        f"explore.ExplorerUI(ex)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, root / "explorer.ipynb")
    # JupyterLab's assets and the widgets extension live under the prefix jupyterlab is installed in
    share = Path(jupyterlab.__file__).resolve().parents[4] / "share" / "jupyter"
    env = {**os.environ, "JUPYTER_PATH": os.pathsep.join(filter(None, [str(share), os.environ.get("JUPYTER_PATH")])),
           "JUPYTERLAB_DIR": str(share / "lab"), "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "JUPYTER_CONFIG_DIR": str(root / ".jupyter"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
                             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", "--allow-root",
                             f"--ServerApp.root_dir={root}", "--LabApp.news_url=", "--ServerApp.open_browser=False"],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                    pytest.fail(f"JupyterLab did not start: {out[-2000:]}")
                time.sleep(0.5)
        yield url, key, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root / ".runtime", ignore_errors=True)


def test_explorer_renders_in_jupyterlab_and_scores_a_prediction(lab, playwright_api) -> None:
    url, key, root = lab
    with playwright_api() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        try:
            page.goto(f"{url}/lab/tree/explorer.ipynb?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)   # the kernel is up
            page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
            page.keyboard.press("Shift+Enter")                           # run the explorer cell
            check = page.get_by_role("button", name="check my answer")
            check.wait_for(timeout=120_000)                               # the widget rendered
            assert page.get_by_text("What would you answer?").is_visible()
            assert page.locator("select").count() >= 5                     # filters, choice, pair list
            assert page.get_by_text("Expected:").count() == 0               # nothing revealed yet
            page.get_by_placeholder("your answer (e.g. 7.2) or, when abstaining, why").fill(key)
            check.click()
            page.get_by_text("✔ correct").wait_for(timeout=60_000)         # scored by the verifier
            assert page.get_by_text("Expected:").count() >= 1
            assert page.get_by_text("A robust solution path").count() >= 1
        except Exception:
            page.screenshot(path=str(root / "failure.png"))      # kept in pytest's temp dir to look at
            raise
        finally:
            browser.close()
