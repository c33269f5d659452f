"""The checkpoint report opened from disk in Chromium with every http(s) request aborted: each plotly figure is
drawn (an SVG with marks), so the file needs nothing from the network; and at 1024 px, like a page: no tick label cut
at a figure's edge or under its axis title, no table wider than the window, a hint said once."""

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
    document.querySelectorAll('.table-wrap').forEach(wrap => {
        const heads = Array.from(wrap.querySelectorAll('th')).map(h => h.textContent);
        if (wrap.scrollWidth > wrap.clientWidth + 1) problems.push(`table wider than the window: ${heads}`);
    });
    return problems;
}"""


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
