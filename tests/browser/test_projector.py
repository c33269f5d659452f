"""Every page of ``app.py``'s ``PAGES`` on a 1024×768 projector and a 1440 px screen, with the default models and with
a real checkpoint uploaded through the sidebar: no exception or error box, no stray "None", a page title that fits,
figures whose legend stays clear of the axis titles, and a plot area left to read; no label, text or select box
value cut with "…", and no table wider than the page (a verdict or a column scrolled out of sight).

Screenshots go to ``test-artifacts/browser/projector/`` (git-ignored): look at them after a change to a page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ..app_pages import app_pages
from ..conftest import CHECKPOINTS
from .test_app_in_browser import assert_no_failure, choose_file, settle, sidebar

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VIEWPORTS = {"projector": (1024, 768), "wide": (1440, 900)}
MIN_PLOT_AREA_PX = 150
"""The smallest plot area (px tall) a chart may leave between its title, legend and axes (a picture of filters with
square pixels is as tall as its rows of tiles)."""

LAYOUT_PROBLEMS_JS = """() => {
    const problems = [];
    const box = el => el.getBoundingClientRect();
    const overlap = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    const h1 = document.querySelector('[data-testid="stMain"] h1');
    if (h1 && h1.scrollWidth > h1.clientWidth + 1) problems.push(`page title cut: ${h1.innerText}`);
    document.querySelectorAll('.js-plotly-plot').forEach((gd, i) => {
        const title = (gd.querySelector('.gtitle') || {}).textContent || `figure ${i}`;
        const legend = gd.querySelector('.legend');
        const plots = gd.querySelectorAll('.cartesianlayer .subplot .bg, .bglayer .bg');
        const texts = Array.from(gd.querySelectorAll('.xtitle, .ytitle, .g-xtitle text, .g-ytitle text'));
        if (legend) {
            const lb = box(legend);
            texts.forEach(t => { if (overlap(lb, box(t))) problems.push(`${title}: legend over "${t.textContent}"`); });
        }
        const tallest = Math.max(0, ...Array.from(plots).map(p => box(p).height));
        const picture = gd._fullLayout && gd._fullLayout.yaxis && gd._fullLayout.yaxis.scaleanchor;  // sized by aspect
        if (plots.length && gd._fullLayout && !gd._fullLayout.grid && plots.length === 1 && !picture
            && tallest < MIN_PLOT_AREA_PX)
            problems.push(`${title}: plot area ${Math.round(tallest)} px tall`);
        const gtitle = gd.querySelector('.gtitle');
        if (gtitle && box(gtitle).right > box(gd).right + 1) problems.push(`${title}: title runs off the figure`);
    });
    const main = '[data-testid="stMain"] ';
    document.querySelectorAll(main + '*').forEach(el => {  // a label or text Streamlit ends with "…"
        if (getComputedStyle(el).textOverflow === 'ellipsis' && el.scrollWidth > el.clientWidth + 1
            && el.innerText.trim()) problems.push(`text cut: ${el.innerText.trim()}`);
    });
    const ctx = document.createElement('canvas').getContext('2d');
    document.querySelectorAll(main + 'input[role="combobox"]').forEach(el => {  // a select box's chosen value
        const style = getComputedStyle(el);
        ctx.font = style.font;
        const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        if (ctx.measureText(el.value).width > room + 1) problems.push(`select box cut: ${el.value}`);
    });
    document.querySelectorAll(main + '.dvn-scroller, ' + main + '[data-testid="stTable"] *').forEach(el => {
        const table = el.closest('[data-testid="stDataFrame"], [data-testid="stTable"]');
        if (['auto', 'scroll'].includes(getComputedStyle(el).overflowX) && el.scrollWidth > el.clientWidth + 1
            && box(el).width > 0) {
            const heads = Array.from(table.querySelectorAll('th, [role="columnheader"]')).map(h => h.innerText);
            problems.push(`table wider than the page (${el.scrollWidth} > ${el.clientWidth} px): ${heads.join(', ')}`);
        }
    });
    return problems;
}""".replace("MIN_PLOT_AREA_PX", str(MIN_PLOT_AREA_PX))


def page_problems(page) -> list[str]:
    """What a reader would stumble on in the main area: "None" shown as a value, and the layout problems above."""
    text = page.locator('[data-testid="stMain"]').inner_text()
    problems = [f'stray "None": …{text[max(0, m.start() - 60): m.end() + 20]!r}…'
                for m in re.finditer(r"\bNone\b", text)]
    return problems + page.evaluate(LAYOUT_PROBLEMS_JS)


def visit_every_page(page, folder: Path, where: str) -> dict[str, list[str]]:
    """Open every page by its sidebar link; a screenshot of each; the problems found, by page."""
    found = {}
    for number, entry in enumerate(app_pages(), start=1):
        sidebar(page).locator('[data-testid="stSidebarNavLink"]', has_text=entry.title).click()
        settle(page)
        page.wait_for_timeout(1500)  # plotly draws after the script run ends
        assert_no_failure(page, f"{where}: {entry.title}")
        errors = page.locator('[data-testid="stMain"] [data-testid="stAlertContentError"]').all_inner_texts()
        found[entry.title] = [f"error box: {e}" for e in errors] + page_problems(page)
        whole_page_screenshot(page, folder / f"{where}-{number:02d}-{Path(entry.path).stem}.png")
    problems = {title: problems for title, problems in found.items() if problems}
    (folder / f"{where}-problems.json").write_text(json.dumps(problems, indent=2, ensure_ascii=False))
    return problems


def whole_page_screenshot(page, path: Path) -> None:
    """The whole page, not the window: Streamlit scrolls its main area inside the window, so the window is made as
    tall as that area for the shot (the width, which sets the layout, stays)."""
    size = page.viewport_size
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], min(height, 16_000))})
    page.wait_for_timeout(500)
    page.screenshot(path=str(path))
    page.set_viewport_size(size)


@pytest.fixture
def folder(artifacts: Path) -> Path:
    path = artifacts / "projector"
    path.mkdir(exist_ok=True)
    return path


@pytest.mark.parametrize("screen", list(VIEWPORTS))
def test_every_page_reads_well_with_the_default_models(browser, app_url: str, folder: Path, screen: str) -> None:
    width, height = VIEWPORTS[screen]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(300_000)
    page = context.new_page()
    page.goto(app_url)
    settle(page)
    problems = visit_every_page(page, folder, f"{screen}-default")
    context.close()
    assert not problems, problems


@pytest.mark.parametrize("checkpoint", ["resnet20_cifar10.th", "mobilenet_v2_imagenet.pt"])
def test_every_page_reads_well_with_an_uploaded_checkpoint(browser, app_url: str, folder: Path,
                                                          checkpoint: str) -> None:
    path = CHECKPOINTS / checkpoint
    if not path.exists():
        pytest.skip(f"real fixture {path} is absent")
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    context.set_default_timeout(300_000)
    page = context.new_page()
    page.goto(app_url)
    settle(page)
    choose_file(page, path)
    alerts = sidebar(page).locator('[data-testid="stAlert"]')  # one notice: how the upload was recognised
    assert alerts.count() == 1 and any(words in alerts.first.inner_text() for words in (
        "holds a CIFAR resnet20", "is added as weights only")), alerts.all_inner_texts()
    chips = sidebar(page).locator('[data-testid="stMultiSelect"]').first.inner_text()
    assert path.name in chips, chips  # the file's own name, not its content hash
    problems = visit_every_page(page, folder, f"upload-{path.stem}")
    context.close()
    assert not problems, problems


def test_the_training_form_reads_whole_on_a_projector(browser, app_url: str, folder: Path) -> None:
    """The Training Lab's form (not its default view): every label whole at 1024 px ("Freeze the…" was cut)."""
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    context.set_default_timeout(300_000)
    page = context.new_page()
    page.goto(f"{app_url}/training-lab?lab=train")
    settle(page)
    assert_no_failure(page, "Training Lab form")
    problems = page_problems(page)
    whole_page_screenshot(page, folder / "projector-training-form.png")
    context.close()
    assert not problems, problems


FIVE_MODELS = "demo:tiny_vgg,demo:tiny_vgg_init,demo:squeezenet1_0,torchvision:squeezenet1_0,demo:mobilenet_v2"
FIRST_LAYER_PAGES = ("Home", "Energy Profiles", "Whitening", "Report")


def test_five_models_on_the_first_layer_pages(browser, app_url: str, folder: Path) -> None:
    """Five models side by side: the figures keep their plot areas and legends clear of the axes, and Energy shows
    a summary card for each (it showed the first four)."""
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    context.set_default_timeout(300_000)
    page = context.new_page()
    page.goto(f"{app_url}/?models={FIVE_MODELS}")
    settle(page)
    scrolled = page.evaluate("() => Array.from(document.querySelectorAll('.st-key-model_picker *'))"
                             ".filter(el => el.scrollHeight > el.clientHeight + 1).length")
    assert scrolled == 0, "the sidebar's model picker hides models in a scrolled box"
    problems = {}
    for number, entry in enumerate(e for e in app_pages() if e.title in FIRST_LAYER_PAGES):
        sidebar(page).locator('[data-testid="stSidebarNavLink"]', has_text=entry.title).click()
        settle(page)
        page.wait_for_timeout(1500)
        assert_no_failure(page, entry.title)
        if found := page_problems(page):
            problems[entry.title] = found
        whole_page_screenshot(page, folder / f"five-models-{number:02d}-{Path(entry.path).stem}.png")
        if entry.title == "Energy Profiles":
            labels = page.locator('[data-testid="stMetricLabel"]').all_inner_texts()
            assert sum(label.strip() == "theory r" for label in labels) == 5, labels
    context.close()
    assert not problems, problems
