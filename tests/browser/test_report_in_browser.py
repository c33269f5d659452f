"""The checkpoint report opened from disk in Chromium with every http(s) request aborted: each plotly figure is
drawn (an SVG with marks), so the file needs nothing from the network; and at 1024 px, like a page: no tick label cut
at a figure's edge or under its axis title, no word or number of a table broken across lines (a wide table scrolls in
its frame), a hint said once; the real MobileNetV2's report likewise, its 52 layers' names each on their own row."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_core.cli import main

from ..report.test_report import FAST, write_checkpoint

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DRAWN_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    svg: gd.querySelectorAll('svg.main-svg').length,
    marks: gd.querySelectorAll('.main-svg path, .main-svg image').length,
}))"""


WRAPPED_CELLS_JS = """() => Array.from(document.querySelectorAll('td, th')).filter(cell => {
    const text = cell.textContent.trim();
    if (!text || /\\s/.test(text)) return false;  // a cell of several words may wrap between them
    const range = document.createRange();
    range.selectNodeContents(cell);
    return new Set(Array.from(range.getClientRects()).map(line => Math.round(line.top))).size > 1;
}).map(cell => cell.textContent.trim())"""
"""The table cells of one word or number that the browser broke onto a second line ("mobilenet_v|2", "0.0661|9")."""


READS_WELL_JS = """() => {
    const problems = [];
    const box = el => el.getBoundingClientRect();
    const overlap = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    document.querySelectorAll('.js-plotly-plot').forEach((gd, i) => {
        const title = (gd.querySelector('.gtitle') || {}).textContent || `figure ${i}`;
        const figure = box(gd);
        const ticks = Array.from(gd.querySelectorAll('.ytick text, .xtick text')).filter(t => box(t).width > 0);
        ticks.forEach(t => {
            const b = box(t);
            if (b.left < figure.left - 1 || b.right > figure.right + 1)
                problems.push(`${title}: tick label "${t.textContent}" cut at the figure's edge`);
        });
        gd.querySelectorAll('.g-ytitle text, .g-xtitle text').forEach(axis => {
            if (ticks.some(t => overlap(box(axis), box(t)))) problems.push(`${title}: ${axis.textContent} on ticks`);
        });
    });
    document.querySelectorAll('.table-wrap').forEach(wrap => {  // a wide table scrolls in its frame, not the page
        if (document.documentElement.scrollWidth > window.innerWidth + 1) problems.push('the page scrolls sideways');
    });
    return problems.concat((WRAPPED_CELLS_JS)().map(text => `"${text}" broken across lines in a table`));
}""".replace("WRAPPED_CELLS_JS", WRAPPED_CELLS_JS)


def test_the_report_file_draws_every_figure_offline(browser, artifacts: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for name, scale in (("ckpt_1", 0.1), ("ckpt_2", 0.5)):
        write_checkpoint(folder / f"{name}.safetensors", scale, depthwise=True)
    html = tmp_path / "report.html"
    assert main(["report", "--model", f"weights:{folder}", *FAST, "--html", str(html)]) == 0
    expected = html.read_text(encoding="utf-8").count('class="plotly-graph-div"')

    context = browser.new_context(viewport={"width": 1024, "height": 768})  # a projector, like the pages
    requested: list[str] = []

    def refuse(route) -> None:
        requested.append(route.request.url)
        route.abort()

    context.route("http://**/*", refuse)
    context.route("https://**/*", refuse)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(html.as_uri())
    page.wait_for_function(f"() => ({DRAWN_JS})().filter(p => p.svg > 0 && p.marks > 0).length >= {expected}",
                           timeout=60_000)
    drawn = page.evaluate(DRAWN_JS)
    problems = page.evaluate(READS_WELL_JS)
    page.screenshot(path=str(artifacts / "report.png"), full_page=True)
    context.close()
    assert not problems, problems
    assert html.read_text(encoding="utf-8").count("extends the profile to a deeper layer") == 1  # not once a layer
    assert expected >= 10 and len(drawn) == expected  # energy, whitening, master keys, weights, trajectory figures
    assert all(p["svg"] > 0 and p["marks"] > 0 for p in drawn)
    assert requested == [] and errors == []


def opened_at_1024(browser, html: Path):
    """The report file in a 1024×768 window, every figure drawn."""
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    page = context.new_page()
    page.goto(html.as_uri())
    expected = html.read_text(encoding="utf-8").count('class="plotly-graph-div"')
    page.wait_for_function(f"() => ({DRAWN_JS})().filter(p => p.svg > 0 && p.marks > 0).length >= {expected}",
                           timeout=120_000)
    return context, page


def test_the_mobilenet_report_breaks_no_word_or_number_of_a_table_at_1024_px(browser, artifacts: Path,
                                                                               tmp_path: Path) -> None:
    """The bar (classroom3): the report of demo:mobilenet_v2 in Chromium at 1024×768."""
    html = tmp_path / "mobilenet_v2.html"
    assert main(["report", "--model", "demo:mobilenet_v2", "--seeds", "3", "--max-images", "4", "--quiet",
                 "--html", str(html)]) == 0
    context, page = opened_at_1024(browser, html)
    wrapped = page.evaluate(WRAPPED_CELLS_JS)
    problems = page.evaluate(READS_WELL_JS)
    cells = page.evaluate("() => document.querySelectorAll('td').length")
    hashes = page.evaluate("() => Array.from(document.querySelectorAll('td[title]'))"
                           ".map(cell => [cell.title, cell.textContent])")
    layers = page.evaluate("""() => { const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(g => (g.querySelector('.gtitle') || {}).textContent.includes('filter norms'));
        const ticks = Array.from(gd.querySelectorAll('.ytick text')).map(t => t.getBoundingClientRect())
            .sort((a, b) => a.top - b.top);
        return {count: ticks.length, size: parseFloat(getComputedStyle(gd.querySelector('.ytick text')).fontSize),
                overlaps: ticks.slice(1).filter((b, i) => b.top < ticks[i].bottom - 1).length}; }""")
    page.screenshot(path=str(artifacts / "report-mobilenet-1024.png"), full_page=True)
    context.close()
    assert cells > 100 and wrapped == [], wrapped
    assert not problems, problems
    assert hashes and all(len(full) == 64 and shown.endswith("…") and full.startswith(shown[:-1])
                          for full, shown in hashes)  # shortened, the whole SHA-256 on hover
    assert layers["count"] == 52 and layers["size"] >= 14 and layers["overlaps"] == 0, layers
