"""Home, Channel Axes, Swap & Re-score and Training Lab in a real browser on a 1024×768 projector and a 1440-px screen:
no exception, no literal "None", no title cut off, the kernel picture with its colour bar, one Apply per Channel Axes
change, Streamlit's Running indicator during a long run, and Enter in the run form starting nothing.

Screenshots go to ``test-artifacts/browser/`` (git-ignored); look at them.
"""

from __future__ import annotations

import contextlib
import re
import time

import pytest

from ..conftest import TINY_MODELS
from .test_app_in_browser import assert_no_failure, drawn_plots, settle, sidebar

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SIZES = {"projector": (1024, 768), "wide": (1440, 900)}
CUT_TITLES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(gd => {
    const box = gd.getBoundingClientRect();
    return Array.from(gd.querySelectorAll('.gtitle, .gtitle-subtitle')).filter(t => {
        const r = t.getBoundingClientRect();
        return r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1);
    }).map(t => t.textContent);
})"""
"""The figure titles (and subtitles) that stick out of their figure: plotly does not wrap them."""


@pytest.fixture(params=list(SIZES))
def screen(request, browser):
    """A browser session at one of :data:`SIZES` (the viewport's width and height)."""
    width, height = SIZES[request.param]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(60_000)
    tab = context.new_page()
    tab.size_name = request.param
    yield tab
    context.close()


def main_text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def assert_readable(page, where: str) -> None:
    """No exception, no "None" cell or text, no figure title cut off."""
    assert_no_failure(page, where)
    cells = page.locator('[data-testid="stDataFrame"]').all_inner_texts()
    assert not any("None" in cell.split() for cell in cells), f"{where}: a table shows None"
    assert " None " not in f" {main_text(page)} ", f"{where}: the page says None"
    assert page.evaluate(CUT_TITLES_JS) == [], f"{where}: figure titles cut off"


@pytest.mark.parametrize(("path", "query", "plots"), [
    ("", TINY_MODELS, 2), ("channel-axes", "demo:tiny_vgg", 5), ("training-lab", TINY_MODELS, 4),
    ("swap-rescore", TINY_MODELS, 2)])
def test_my_pages_are_readable_at_projector_and_wide_sizes(screen, app_url: str, artifacts, path: str, query: str,
                                                           plots: int) -> None:
    screen.goto(f"{app_url}/{path}?models={query}&axes_ncal=64&axes_neval=32")
    settle(screen)
    drawn_plots(screen, at_least=plots, timeout_ms=300_000)
    assert_readable(screen, f"{path or 'home'} at {screen.size_name}")
    screen.screenshot(path=str(artifacts / f"classroom-{path or 'home'}-{screen.size_name}.png"), full_page=True)


def test_channel_axes_kernel_picture_has_a_colour_bar_and_a_layer_change_waits_for_apply(page, app_url: str,
                                                                                        artifacts) -> None:
    page.goto(f"{app_url}/channel-axes?models=demo:tiny_vgg&axes_ncal=64&axes_neval=32&axes_layer=features.11")
    settle(page)
    drawn_plots(page, at_least=5, timeout_ms=300_000)
    kernel = page.locator('.js-plotly-plot', has=page.locator('.gtitle', has_text="its kernel on each"))
    assert kernel.locator('.colorbar').count() == 1 and kernel.bounding_box()["height"] >= 300
    layer = page.locator('[data-testid="stSelectbox"]', has_text="Layer")
    layer.click()
    page.get_by_role("option", name="features.7", exact=False).first.click()
    settle(page)
    assert "not applied yet" in main_text(page) and "about" in main_text(page)  # the estimate, before starting
    page.screenshot(path=str(artifacts / "classroom-channel-axes-pending.png"), full_page=True)
    page.get_by_role("button", name="Apply").click()
    assert running_is_shown(page), "a run of over 2 s without Streamlit's Running / Stop indicator"
    page.screenshot(path=str(artifacts / "classroom-channel-axes-running.png"))
    settle(page)
    assert "not applied yet" not in main_text(page) and "features.7" in page.url
    page.locator('[data-testid="stMainMenuButton"]').click()  # the menu users get: no "Clear cache" (shared caches)
    assert "Print" in page.locator('[data-testid="stMainMenuList"]').inner_text()
    assert "Clear cache" not in page.locator('[data-testid="stMainMenuList"]').inner_text()


def running_is_shown(page, within_s: float = 2.0, poll_ms: int = 100, limit_s: float = 60.0) -> bool:
    """Whether Streamlit's Running / Stop indicator shows while the script run that just started lasts more than
    ``within_s`` (a run that ends sooner needs none)."""
    from playwright.sync_api import expect

    app, status = page.locator('[data-testid="stApp"]'), page.locator('[data-testid="stStatusWidget"]')
    with contextlib.suppress(AssertionError):
        expect(app).to_have_attribute("data-test-script-state", "running", timeout=3_000)
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if status.is_visible():
            return True
        if app.get_attribute("data-test-script-state") == "notRunning":
            return time.monotonic() - started <= within_s
        page.wait_for_timeout(poll_ms)
    return False


def test_enter_in_the_run_form_starts_no_run(page, app_url: str) -> None:
    page.goto(f"{app_url}/training-lab?lab=train&models={TINY_MODELS}")
    settle(page)
    steps = page.get_by_role("spinbutton", name="Steps")
    steps.fill("7")
    steps.press("Enter")
    settle(page)
    assert page.get_by_role("heading", name="Your run", exact=True).count() == 0  # "Your runs" is a mode, not a run
    assert page.get_by_role("button", name="Cancel").count() == 0


FIRST_FIGURE_JS = """() => {
    const gd = document.querySelector('[data-testid="stMain"] .js-plotly-plot');
    const texts = selector => Array.from(gd.querySelectorAll(selector)).filter(t => t.textContent.trim())
        .map(t => ({text: t.textContent, size: parseFloat(getComputedStyle(t).fontSize),
                    fill: getComputedStyle(t).fill}));
    return {top: gd.getBoundingClientRect().top, paper: gd._fullLayout.paper_bgcolor,
            ticks: texts('.xtick text, .ytick text'), titles: texts('.g-xtitle text, .g-ytitle text, .gtitle')};
}"""
"""The page's first figure as Chromium draws it: where it starts, its paper colour and the computed font size and fill
of its tick labels and titles."""
FIRST_SCREEN_PLOT_PX = 250
"""The first figure starts this far above the bottom of a 768-px window at least: its title and a good part of its plot
are in the first screen."""


@pytest.fixture
def projector(browser):
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    context.set_default_timeout(300_000)
    yield context.new_page()
    context.close()


def test_home_opens_on_a_figure_whose_text_reads_on_a_projector(projector, app_url: str, artifacts) -> None:
    """The bar (classroom3): Home's first figure as the dashboard draws it at 1024×768."""
    from ..test_figures import contrast_ratio

    projector.goto(app_url)
    settle(projector)
    drawn_plots(projector, at_least=1, timeout_ms=300_000)
    figure = projector.evaluate(FIRST_FIGURE_JS)
    projector.screenshot(path=str(artifacts / "classroom-home-first-screen.png"))
    assert figure["top"] < 768 - FIRST_SCREEN_PLOT_PX, figure["top"]
    assert len(figure["ticks"]) >= 6 and len(figure["titles"]) >= 3
    for kind, minimum in (("ticks", 14), ("titles", 16)):
        for text in figure[kind]:
            assert text["size"] >= minimum, (kind, text)
            assert contrast_ratio(text["fill"], figure["paper"]) >= 4.5, (kind, text, figure["paper"])


def test_swap_and_rescore_opens_on_its_result_and_says_what_it_shows(projector, app_url: str, artifacts) -> None:
    projector.goto(f"{app_url}/swap-rescore")
    # anchored and case-sensitive: has_text="Same top-1 class" also matches the per-layer figure's "…: same top-1
    # class as the original" (Playwright's text match ignores case), a strict-mode violation
    projector.locator(".js-plotly-plot .gtitle", has_text=re.compile(r"^Same top-1 class")).wait_for(timeout=900_000)
    drawn_plots(projector, at_least=1, timeout_ms=60_000)
    figure = projector.evaluate(FIRST_FIGURE_JS)
    projector.screenshot(path=str(artifacts / "classroom-swap-first-screen.png"))
    assert figure["top"] < 768 - FIRST_SCREEN_PLOT_PX and "original" in " ".join(t["text"] for t in figure["ticks"])
    assert "compound across layers" in main_text(projector)


def test_the_sidebar_writes_every_model_name_whole(projector, app_url: str) -> None:
    projector.goto(f"{app_url}/?models=demo:squeezenet1_0,torchvision:squeezenet1_0,demo:mobilenet_v2")
    sidebar(projector).get_by_text("In full:").wait_for()  # the sidebar is drawn before the page computes
    projector.wait_for_timeout(1000)
    chips = projector.evaluate("() => Array.from(document.querySelectorAll('.st-key-model_picker [data-tag] > span'))"
                               ".filter(c => c.getBoundingClientRect().width > 0)"
                               ".map(c => [c.textContent, c.scrollWidth <= c.clientWidth + 1])")
    assert len(chips) == 3 and all(whole for _, whole in chips), chips  # no "squeezenet1_0 (de…"
    caption = sidebar(projector).get_by_text("In full:").inner_text()
    assert all(name in caption for name, _ in chips), caption


def test_the_survey_offers_cancel_only_while_something_runs(projector, app_url: str) -> None:
    projector.goto(f"{app_url}/survey?models={TINY_MODELS}")
    settle(projector)
    drawn_plots(projector, at_least=1, timeout_ms=300_000)
    assert projector.get_by_role("button", name="Cancel").count() == 0
    assert "on the bundled photos" in main_text(projector) and " on bundled" not in main_text(projector)
