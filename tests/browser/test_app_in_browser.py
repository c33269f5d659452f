"""The dashboard in a real browser: pick the demo model, visit every page of ``app.py``'s ``PAGES``, see the plotly
figures drawn, download tables and figures, and upload checkpoints through the sidebar's file chooser.

Screenshots go to ``test-artifacts/browser/`` (git-ignored).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import time
from pathlib import Path

import pytest

from ..app_pages import app_pages
from ..conftest import CHECKPOINTS, require_fixture
from ..test_hostile_uploads import CORPUS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_TIMEOUT_MS = 300_000
"""Longest a page's first run may take on two busy CPU cores (later visits reuse the server's caches)."""

DRAWN_PLOTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    traces: (gd._fullData || []).length,
    marks: gd.querySelectorAll('.main-svg path, .main-svg image').length,
    height: gd.getBoundingClientRect().height,
}))"""


def settle(page, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """Wait until Streamlit has finished the script run that the last action started."""
    from playwright.sync_api import expect

    app = page.locator('[data-testid="stApp"]')
    with contextlib.suppress(AssertionError):  # a quick run may be over before we look
        expect(app).to_have_attribute("data-test-script-state", "running", timeout=3_000)
    expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=timeout_ms)
    page.wait_for_timeout(300)


def drawn_plots(page, at_least: int = 1, timeout_ms: int = 30_000) -> list[dict]:
    """The page's plotly figures, once there are ``at_least`` of them and each has data traces and SVG marks."""
    page.wait_for_function(f"() => {{ const plots = ({DRAWN_PLOTS_JS})(); return plots.length >= {at_least} && "
                           "plots.every(p => p.traces > 0 && p.marks > 0 && p.height > 50); }", timeout=timeout_ms)
    return page.evaluate(DRAWN_PLOTS_JS)


def assert_no_failure(page, where: str) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, f"{where}: an exception is shown"
    text = page.locator('[data-testid="stMain"]').inner_text()
    assert "Something went wrong" not in text, f"{where}: {text[:2000]}"


def sidebar(page):
    return page.locator('[data-testid="stSidebar"]')


def pick_model(page, label: str) -> None:
    """Choose a model in the sidebar's "Models" multiselect by its label, as a user types and clicks."""
    picker = sidebar(page).locator('[data-testid="stMultiSelect"]').first
    picker.click()
    page.keyboard.type(label.split(" ")[0])
    page.get_by_role("option", name=label, exact=True).click()
    page.keyboard.press("Escape")


def choose_file(page, path: Path) -> None:
    """Open the sidebar's "Upload a checkpoint" form, pick ``path`` in the file chooser, press "Add upload"."""
    expander = sidebar(page).locator('[data-testid="stExpander"]', has_text="Upload a checkpoint")
    if not expander.locator('[data-testid="stFileUploaderDropzone"]').is_visible():
        expander.locator("summary").click()
    with page.expect_file_chooser() as chooser:
        expander.locator('[data-testid="stFileUploaderDropzone"]').click()
    chooser.value.set_files(str(path))
    page.wait_for_timeout(500)
    settle(page)
    expander.get_by_role("button", name="Add upload").click()
    settle(page)


def download(page, button, folder: Path) -> Path:
    with page.expect_download() as event:
        button.click()
    target = folder / event.value.suggested_filename
    event.value.save_as(target)
    return target


def test_pick_the_demo_model_and_visit_every_page(page, app_url: str, artifacts: Path, tmp_path: Path) -> None:
    pages = app_pages()
    page.goto(f"{app_url}/?models=")
    settle(page)
    assert "Pick at least one model" in page.locator('[data-testid="stMain"]').inner_text()
    pick_model(page, "tiny_vgg (demo)")
    settle(page)
    assert "models=demo%3Atiny_vgg" in page.url or "models=demo:tiny_vgg" in page.url

    seen = {}
    for number, entry in enumerate(pages, start=1):
        start = time.perf_counter()
        if number > 1:
            sidebar(page).locator('[data-testid="stSidebarNavLink"]', has_text=entry.title).click()
            settle(page)
        assert_no_failure(page, entry.title)
        plots = drawn_plots(page)
        page.screenshot(path=str(artifacts / f"{number:02d}-{Path(entry.path).stem}.png"), full_page=True)
        seen[entry.title] = {"plots": len(plots), "seconds": round(time.perf_counter() - start, 1)}
        tags = sidebar(page).locator('[data-testid="stMultiSelect"]').first.inner_text()
        assert "tiny_vgg (demo)" in tags, f"{entry.title}: the sidebar lost the selection"
    (artifacts / "pages.json").write_text(json.dumps(seen, indent=2))
    assert all(visit["plots"] >= 1 for visit in seen.values()), f"pages without a drawn plot: {seen}"

    sidebar(page).locator('[data-testid="stSidebarNavLink"]', has_text=pages[0].title).click()
    settle(page)
    main = page.locator('[data-testid="stMain"]')
    table = download(page, main.get_by_role("button", name=re.compile("CSV table")).first, tmp_path)
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert rows and all(rows[0].values())
    figure = download(page, main.get_by_role("button", name=re.compile("HTML figure")).first, tmp_path)
    assert "plotly" in figure.read_text().lower() and figure.stat().st_size > 10_000
    data = download(page, main.get_by_role("button", name=re.compile("JSON")).first, tmp_path)
    assert json.loads(data.read_text())


def test_upload_checkpoints_through_the_file_chooser(page, app_url: str, artifacts: Path, upload_dir: Path,
                                                    tmp_path: Path) -> None:
    real = require_fixture(CHECKPOINTS / "resnet20_cifar10.th")
    page.goto(f"{app_url}/?models=demo:tiny_vgg")
    settle(page)
    before = len(drawn_plots(page, at_least=2))  # Home draws the energy profiles and the whitening curves
    stored = set(upload_dir.iterdir())  # other tests of the session may have uploaded to this server

    hostile = next(e for e in CORPUS if e.name == "exec_beside_weights.pt")
    sentinel = tmp_path / "SENTINEL-code-ran"
    evil = tmp_path / hostile.name
    evil.write_bytes(hostile.build(sentinel))
    choose_file(page, evil)
    alert = sidebar(page).locator('[data-testid="stAlert"]')
    assert "exec_beside_weights.pt" in alert.inner_text() and "never does that" in alert.inner_text()
    assert not sentinel.exists() and set(upload_dir.iterdir()) == stored
    assert len(drawn_plots(page, at_least=before)) == before  # the page still serves
    page.screenshot(path=str(artifacts / "upload-refused.png"), full_page=True)

    choose_file(page, real)
    notices = sidebar(page).locator('[data-testid="stAlert"]')  # one: how the upload was recognised
    assert notices.count() == 1 and "holds a CIFAR resnet20" in notices.first.inner_text(), notices.all_inner_texts()
    tags = sidebar(page).locator('[data-testid="stMultiSelect"]').first.inner_text()
    assert "resnet20_cifar10.th" in tags and "weights:" not in tags  # a runnable cifar:resnet20, by its file's name
    assert "12fca82f0bebc4135bf1f32f/resnet20_cifar10.th" in [  # kept in its SHA-256's folder under its name
        p.relative_to(upload_dir).as_posix() for p in upload_dir.glob("*/*")]
    main = page.locator('[data-testid="stMain"]')
    assert "resnet20_cifar10.th" in main.text_content()  # the Home page's figures show the uploaded model
    assert_no_failure(page, "after upload")
    drawn_plots(page, at_least=before)
    page.screenshot(path=str(artifacts / "upload-accepted.png"), full_page=True)
