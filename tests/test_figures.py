"""The figure pieces every family shares (fl_core/figures.py): colours, filter tiles, heatmaps, offline HTML."""

from __future__ import annotations

import ast
from dataclasses import replace

import numpy as np
import plotly.graph_objects as go
import pytest

from fl_core.figures import (
    CELL_TEXT_PX,
    COLORBAR_PX,
    MAX_CELL_PX,
    MAX_LOG_TICKS,
    MAX_ZOOM_ROWS,
    MIN_TILE_PX,
    NARROW_FIGURE_PX,
    TICK_FONT_PX,
    TILE_GAP,
    TITLE_CHARS,
    TOOLBAR_PX,
    cell_text,
    cell_text_px,
    diverging_rgb,
    figure_html,
    filter_rgb,
    filter_zoom_figure,
    heatmap_figure,
    log_axis,
    log_tick_text,
    log_ticks,
    readable,
    standalone,
    tile_columns,
    tile_mosaic,
    tiles_figure,
)

from .conftest import REPO
from .figure_gallery import axes, axis_values, gallery


def test_diverging_colours_are_white_at_zero_red_positive_blue_negative_and_clipped():
    rgb = diverging_rgb(np.array([0.0, 1.0, -1.0, 5.0, -5.0]))
    np.testing.assert_allclose(rgb[0], 1.0)
    assert rgb[1][0] > rgb[1][2] and rgb[2][2] > rgb[2][0]  # red has more red, blue more blue
    np.testing.assert_allclose(rgb[3], rgb[1])
    np.testing.assert_allclose(rgb[4], rgb[2])


def test_an_rgb_filter_is_grey_at_zero_and_spans_the_range_at_its_largest_weight():
    filt = np.zeros((3, 3, 3))
    filt[0, 1, 1], filt[2, 0, 0] = 2.0, -2.0
    image = filter_rgb(filt)
    assert image.shape == (3, 3, 3)
    assert image[1, 1, 0] == pytest.approx(1.0) and image[0, 0, 2] == pytest.approx(0.0)
    assert image[2, 2, 1] == pytest.approx(0.5)
    # any other channel count: the channel mean as blue-white-red
    np.testing.assert_allclose(filter_rgb(np.zeros((5, 2, 2))), 1.0)


def test_the_mosaic_places_every_filter_in_its_own_normalized_tile_with_white_gaps():
    rng = np.random.default_rng(0)
    filters = rng.standard_normal((5, 3, 3, 3))
    mosaic = tile_mosaic(filters, pad=1)
    assert mosaic.shape == (2 * 4 + 1, 3 * 4 + 1, 3) and mosaic.dtype == np.uint8  # 3 columns, 2 rows
    assert (mosaic[0] == 255).all() and (mosaic[:, 0] == 255).all()  # the gaps
    scaled = filters.copy()
    scaled[1] *= 100  # each tile is normalized on its own
    np.testing.assert_array_equal(tile_mosaic(scaled), mosaic)
    assert (mosaic[5:8, 9:12] == 255).all()  # the sixth place is empty
    big = tile_mosaic(filters, ncols=5, upsample=4)
    assert big.shape == (4 * 3 + 2, 5 * (4 * 3 + 1) + 1, 3)


@pytest.mark.parametrize("shape", [(64, 3, 3, 3), (96, 3, 7, 7), (32, 3, 11, 11), (64, 1, 3, 3)])
def test_tiles_are_drawn_large_enough_to_see_a_kernel_with_gaps_and_name_themselves_on_hover(shape) -> None:
    fig = tiles_figure(np.ones(shape), "filters")
    picture, centres = fig.data
    assert isinstance(picture, go.Image if shape[1] == 3 else go.Heatmap) and fig.layout.title.text == "filters"
    mosaic_h, mosaic_w = np.asarray(picture.z).shape[:2]
    # the axes span the picture exactly: the hover markers' size no longer pads them (tiles were 42 px, not 48)
    assert tuple(fig.layout.xaxis.range) == (-0.5, mosaic_w - 0.5)
    assert tuple(fig.layout.yaxis.range) == (mosaic_h - 0.5, -0.5)
    bar = 0 if shape[1] == 3 else COLORBAR_PX
    plot_w = NARROW_FIGURE_PX - fig.layout.margin.l - fig.layout.margin.r - bar
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    px_per_cell = min(plot_w / mosaic_w, plot_h / mosaic_h)  # square pixels: the tighter side sets the scale
    columns = tile_columns(shape[0], NARROW_FIGURE_PX - bar)
    tile_cells = (mosaic_w - 1) / columns / (1 + TILE_GAP)  # a tile without its gap, in mosaic cells (about)
    assert tile_cells * px_per_cell >= MIN_TILE_PX * 0.98
    assert list(centres.text[:2]) == ["filter 0", "filter 1"] and len(centres.x) == shape[0]


def test_single_channel_tiles_are_a_heatmap_with_blank_gaps_and_a_colour_bar():
    filters = np.zeros((5, 1, 3, 3))
    filters[:, 0, 1, 1] = [1, -2, 3, -4, 5]
    fig = tiles_figure(filters, "depthwise", labels=list("abcde"))
    heat = fig.data[0]
    assert isinstance(heat, go.Heatmap) and heat.colorbar.title.text == "w / max |w|"
    values = np.asarray(heat.z, dtype=float)
    assert np.isnan(values[0]).all() and np.nanmax(values) == 1 and np.nanmin(values) == -1  # each tile on its own
    assert list(fig.data[1].text) == list("abcde")


def test_a_zoomed_filter_shows_each_colour_channel_with_its_weights_and_one_colour_bar():
    filt = np.arange(27, dtype=float).reshape(3, 3, 3) - 13
    fig = filter_zoom_figure(filt, "filter 4")
    assert [a.text for a in fig.layout.annotations] == ["red", "green", "blue"]
    assert [t.showscale for t in fig.data] == [True, False, False]
    assert all(t.zmax == 13 and t.zmin == -13 for t in fig.data)  # one symmetric scale
    assert fig.data[2].text[2][2] == "13" and fig.data[0].textfont.size == CELL_TEXT_PX
    assert list(cell_text(np.array([-0.001, -0.23, 0.004]), 0.23)) == ["0.00", "-0.23", "0.00"]  # no "-0.00"


@pytest.mark.parametrize("shape", [(3, 3, 3), (3, 5, 5), (3, 7, 7), (1, 7, 7), (8, 3, 3), (3, 11, 11)])
def test_a_zoomed_filter_writes_its_weights_only_in_cells_wide_enough_to_hold_them(shape) -> None:
    """On a 1024-px projector the numbers of a 7×7 colour filter were unreadable: three panels beside the picker
    left 14-px cells. Panels now wrap to rows (at most two) and numbers are written where they fit."""
    filt = np.random.default_rng(0).standard_normal(shape) * 0.1
    fig = filter_zoom_figure(filt, "zoom")
    rows, columns = (len({tuple(fig.layout[f"{axis}axis{getattr(t, f'{axis}axis')[1:]}"].domain) for t in fig.data})
                     for axis in "yx")
    assert rows <= MAX_ZOOM_ROWS or columns == len(filt)
    room = NARROW_FIGURE_PX - COLORBAR_PX - fig.layout.margin.l - fig.layout.margin.r
    cell_px = min(room / columns, MAX_CELL_PX * shape[-1]) / shape[-1] * (1 - 0.03)  # less the panels' gaps
    written = fig.data[0].text is not None
    assert written == (shape[-1] <= 7)  # an 11×11 kernel keeps its numbers for hovering
    if written:
        assert cell_px >= cell_text_px(fig.data[0].text) - 1
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert plot_px >= rows * cell_px * shape[-2]  # tall enough not to shrink the panels


def test_a_heatmap_labels_its_cells_and_leaves_missing_values_blank():
    matrix = np.array([[1.0, 0.25], [np.nan, 1.0]])
    fig = heatmap_figure(matrix, ["a", "b"], "r")
    heat = fig.data[0]
    assert heat.text[0][1] == "0.25" and heat.text[1][0] == ""
    assert (heat.zmin, heat.zmax) == (-1.0, 1.0) and list(heat.x) == ["a", "b"]
    assert heatmap_figure(np.eye(8), list("abcdefgh"), "r").layout.height > fig.layout.height
    assert heat.textfont.size == CELL_TEXT_PX  # plotly shrank the numbers to fit small cells (7 px on a projector)
    crowded = heatmap_figure(np.eye(16) - 0.5, [f"per-channel quantity {i}" for i in range(16)], "r").data[0]
    assert crowded.text is None and "%{z:.3f}" in crowded.hovertemplate  # too small to hold them: on hover only


def test_saved_figures_keep_plotlys_own_look_although_streamlit_made_its_template_the_default(monkeypatch):
    """Importing Streamlit makes its template plotly's default: a figure built in the dashboard then carries colours
    that only the app's browser code replaces, and no automargin, so its saved copies (the HTML figure and the report)
    cut the y tick labels at the left edge under the axis title."""
    import plotly.io as pio
    from streamlit.elements.lib.streamlit_plotly_theme import configure_streamlit_plotly_theme

    from fl_core.report.html import figure_fragment

    configure_streamlit_plotly_theme()
    monkeypatch.setattr(pio.templates, "default", "streamlit")
    fig = readable(go.Figure(go.Scatter(x=[1, 2], y=[0.02, 0.5]), layout=dict(yaxis_title="energy")))
    assert fig.layout.template.layout.yaxis.automargin is None  # as built in the dashboard
    for saved in (standalone(fig), figure_html(fig), figure_fragment(fig)):
        text = saved.to_json() if isinstance(saved, go.Figure) else saved
        assert '"automargin":true' in text.replace(" ", "") and "#000001" not in text
    assert fig.layout.template.layout.yaxis.automargin is None  # the page's own figure is left as it was


def test_a_figure_downloads_as_one_offline_html_file():
    html = figure_html(go.Figure(go.Scatter(x=[1, 2], y=[3, 4])))
    assert html.lstrip().lower().startswith("<!doctype html>") and "Plotly.newPlot" in html
    assert "<script src=" not in html and len(html) > 1_000_000  # plotly.js inlined, no network needed


@pytest.mark.parametrize(("value", "text"), [(1e-3, "0.001"), (0.02, "0.02"), (1.0, "1"), (500.0, "500"),
                                             (2.5, "2.5"), (10_000.0, "10000"), (1e-5, "10⁻⁵"), (2e6, "2×10⁶"),
                                             (0.30000000000000004, "0.3")])
def test_log_tick_labels_read_as_numbers(value: float, text: str) -> None:
    assert log_tick_text(value) == text


def test_log_ticks_are_decades_or_1_2_5_steps_with_at_least_three_on_the_data() -> None:
    assert log_ticks(1e-3, 1.0) == [1e-3, 1e-2, 0.1, 1.0]
    assert log_ticks(0.012, 0.9) == [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]  # two decades: 1-2-5
    assert sum(1.5 <= t <= 2.5 for t in log_ticks(1.5, 2.5)) >= 3  # less than ×2: even steps
    wide = log_ticks(1e-12, 1e6)
    assert len(wide) <= MAX_LOG_TICKS and all(np.log10(t) == round(np.log10(t)) for t in wide)
    for low, high in ((0.3, 0.9), (7.0, 11.0), (2e-7, 3e-4), (0.45, 0.55)):
        assert sum(low <= t <= high for t in log_ticks(low, high)) >= 3, (low, high)


def test_a_log_axis_spans_only_the_positive_finite_values() -> None:
    axis = log_axis([0.0, -1.0, np.nan, 0.01, 10.0], title="t")
    assert axis["type"] == "log" and axis["title"] == "t" and axis["tickvals"] == [0.01, 0.1, 1.0, 10.0]
    assert axis["ticktext"] == ["0.01", "0.1", "1", "10"]


def test_every_log_axis_of_the_library_is_set_by_the_shared_helper() -> None:
    for path in (REPO / "fl_core").rglob("*.py"):
        if path.name != "figures.py":
            text = path.read_text(encoding="utf-8").replace(" ", "")
            assert 'type="log"' not in text and "type='log'" not in text and '"type":"log"' not in text, path


@pytest.mark.slow
def test_every_log_axis_of_every_figure_has_readable_ticks_on_its_data() -> None:
    checked = []
    for name, fig in gallery().items():
        for axis_name, axis in axes(fig).items():
            if axis.type != "log":
                continue
            checked.append(f"{name}.{axis_name}")
            assert axis.tickmode == "array" and list(axis.ticktext) == [log_tick_text(v) for v in axis.tickvals], name
            if axis.range is not None:
                low, high = 10.0 ** np.asarray(axis.range)
            else:
                shown = axis_values(fig, axis_name)
                low, high = shown[shown > 0].min(), shown.max()
            assert sum(low <= v <= high for v in axis.tickvals) >= 2, (name, axis_name, low, high, axis.tickvals)
    assert {"firstlayer.profile.yaxis", "report.weight_norms.xaxis", "lab.fit_over_steps.xaxis",
            "channelaxes.axes_scatter.xaxis"} <= set(checked)


def test_activation_maps_of_a_landscape_image_stay_landscape_in_cells_shaped_like_it() -> None:
    from fl_core.firstlayer.plots import activation_maps_figure

    rng = np.random.default_rng(0)
    image, maps = rng.integers(0, 255, (20, 40, 3), dtype=np.uint8), rng.standard_normal((7, 18, 38))
    fig = activation_maps_figure(image, maps, "wide")
    heatmaps = [trace for trace in fig.data if isinstance(trace, go.Heatmap)]
    assert len(heatmaps) == 7 and all(np.asarray(h.z).shape == (18, 38) for h in heatmaps)  # rows = image rows
    for name, axis in axes(fig).items():
        if name.startswith("yaxis"):
            assert axis.scaleanchor == "x" + name[5:] and axis.autorange == "reversed", name  # square pixels
    tall = activation_maps_figure(image.transpose(1, 0, 2), maps.transpose(0, 2, 1), "tall")
    assert tall.layout.height > 2 * fig.layout.height - 200  # rows as tall as the image is


def test_the_maps_of_the_landscape_coffee_photo_are_landscape(demo) -> None:
    from fl_core.firstlayer.whitening import activation_maps
    from fl_core.io.images import bundled_images

    photo = bundled_images(["coffee"])
    assert photo.image(0).size == (600, 400)
    maps = activation_maps(demo[0], photo.image(0), "coffee")
    height, width = maps.maps.shape[1:]
    assert maps.image.shape[:2] == (height + 2, width + 2) and width / height == pytest.approx(1.5, abs=0.03)


def figure_functions() -> list[tuple[str, ast.FunctionDef]]:
    """Every public function that builds a figure: ``*_figure`` in fl_core/figures.py and every family's plots.py."""
    paths = [REPO / "fl_core" / "figures.py", *sorted((REPO / "fl_core").glob("*/plots.py"))]
    return [(f"{path.parent.name}/{path.name}:{node.name}", node) for path in paths
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_figure") and not node.name.startswith("_")]


def test_every_figure_function_returns_a_figure_laid_out_by_readable() -> None:
    functions = figure_functions()
    assert len(functions) > 30
    names = {node.name for _, node in functions}
    for where, node in functions:
        for ret in (n for n in ast.walk(node) if isinstance(n, ast.Return)):
            call = ret.value
            callee = getattr(getattr(call, "func", None), "id", None)
            assert callee == "readable" or callee in names, f"{where} returns {ast.unparse(call)[:60]}"


def _energy_with(count: int):
    from .figure_gallery import small_energy

    energy = small_energy()
    models = tuple(replace(energy.models[i % len(energy.models)], label=f"a model with a long name {i + 1}")
                   for i in range(count))
    return replace(energy, models=models)


@pytest.mark.slow
@pytest.mark.parametrize("count", [1, 5, 8])
def test_one_to_eight_models_keep_the_profile_plot_area_and_put_the_legend_below_the_axis_title(count: int) -> None:
    from fl_core.firstlayer.plots import profile_figure

    fig = profile_figure(_energy_with(count))
    layout = fig.layout
    plot_px = layout.height - layout.margin.t - layout.margin.b
    assert plot_px == 460 - 50 - 10  # what the figure asks for, however many models
    entries = 2 * count + 1  # each model and its theory fit, and the random-init band
    assert layout.margin.b >= 60 + 22 * entries // 2  # the legend's rows below the axis title
    legend_top = layout.legend.y * layout.height  # pixels above the figure's bottom
    assert layout.legend.yref == "container" and layout.legend.yanchor == "top"
    assert 22 * entries // 2 <= legend_top <= layout.margin.b - 50  # below the tick labels and the axis title


def test_a_long_title_wraps_instead_of_running_off_the_figure() -> None:
    title = "Lesion and peer replacement: Δ cross-entropy on held-out images (the 64 channels with the largest lesion"
    fig = readable(go.Figure(go.Bar(x=["a"], y=[1]), layout=dict(title=title, height=400)))
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) >= 2 and all(len(line) <= TITLE_CHARS for line in lines) and " ".join(lines) == title
    assert readable(fig).layout.to_plotly_json() == fig.layout.to_plotly_json()  # idempotent
    assert fig.layout.margin.t >= len(lines) * 24 + TOOLBAR_PX
    assert fig.layout.title.pad.t == TOOLBAR_PX  # the toolbar shown on hover sits above the title, not over its end


def test_each_bank_keeps_its_colour_when_the_chosen_model_changes_the_order() -> None:
    from fl_core.io.models import load_model
    from fl_core.masterkeys.assignment import bank_assignment
    from fl_core.masterkeys.depthwise import depthwise_bank
    from fl_core.masterkeys.plots import assignment_comparison_figure

    bank = bank_assignment(depthwise_bank(load_model("demo:ppocrv6_det_small_dw7")), kernel_size=7)
    first = assignment_comparison_figure({"text detector": bank, "convnext_atto (random init)": bank})
    second = assignment_comparison_figure({"convnext_atto (random init)": bank, "text detector": bank})
    colours = [{trace.name.split(":")[0]: trace.marker.color for trace in fig.data} for fig in (first, second)]
    assert colours[0] == colours[1] and len(set(colours[0].values())) == 2


SMALL_GLYPHS = set("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₔₕₖₗₘₙₚₛₜ")
"""Unicode subscripts: at the 13-px size of subplot titles and 12-px ticks they read as specks."""


def _shown_texts(fig: go.Figure) -> list[tuple[str, float | None]]:
    """Every text a figure shows with its font size where set: annotations, tick labels, categories, trace names."""
    shown = [(a.text, a.font.size) for a in fig.layout.annotations]
    shown += [(text, None) for axis in axes(fig).values() for text in (axis.ticktext or ())]
    for trace in fig.data:
        shown += [(trace.name, None)] if trace.name else []
        categories = getattr(trace, "x", None)
        shown += [(value, None) for value in (() if categories is None else categories) if isinstance(value, str)]
    return shown


@pytest.mark.slow
def test_master_key_names_are_written_on_the_line_at_a_readable_size() -> None:
    from fl_core.masterkeys.plots import GRID_TITLE_PX, KEY_NAMES

    assert not SMALL_GLYPHS & set("".join(KEY_NAMES)) and GRID_TITLE_PX >= 13
    figures = {name: fig for name, fig in gallery().items() if name.startswith(("masterkeys.", "report."))}
    naming = 0
    for name, fig in figures.items():
        for text, size in _shown_texts(fig):
            if any(key in text for key in KEY_NAMES):
                naming += 1
                assert "<sub>" not in text and not SMALL_GLYPHS & set(text), (name, text)
                assert size is None or size >= 13, (name, text, size)
    assert naming >= 8 * 3  # the key grid's titles, the counts' categories and the stage bars' legend at least


def test_a_model_far_flatter_than_its_learned_filter_is_drawn_on_its_own_scale() -> None:
    """Scale-Space's "Try σ yourself": on one colour scale a model peaking at 0.17 beside a learned filter at 0.95 was
    a nearly blank panel. Each panel now spans its own scale, its largest |value| in its title."""
    from fl_core.masterkeys.plots import model_vs_learned_figure

    learned, model = np.zeros((7, 7)), np.zeros((7, 7))
    learned[3, 3], model[2:5, 2:5] = 0.95, 0.17
    fig = model_vs_learned_figure(learned, model, "one key")
    for panel, peak in zip(fig.data, (0.95, 0.17, 0.78)):
        assert np.abs(np.asarray(panel.z)).max() == pytest.approx(1.0) and (panel.zmin, panel.zmax) == (-1, 1)
        assert np.abs(np.asarray(panel.customdata)).max() == pytest.approx(peak)  # hover: the value itself
    assert [a.text.split("<br>")[1] for a in fig.layout.annotations] == [
        "largest |value| 0.95", "largest |value| 0.17", "largest |value| 0.78"]


def test_a_log_axis_lists_only_the_ticks_on_its_values_and_one_beyond_each_end() -> None:
    """Channel Axes' input-capture axis (0.45 … 3.2) carried the unseen ticks of three whole decades, which turned
    its labels to 45° on a projector."""
    axis = log_axis([0.45, 3.2])
    inside = [t for t in axis["tickvals"] if 0.45 <= t <= 3.2]
    assert len(axis["tickvals"]) <= len(inside) + 2 and len(inside) >= 3
    fig = go.Figure(go.Scatter(x=[0.45, 1.0, 3.2], y=[0, 1, 2]))
    fig.update_xaxes(**axis)
    assert readable(fig).layout.xaxis.tickangle is None  # level labels


def relative_luminance(colour: str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb``, ``rgb(r, g, b)`` or a named colour plotly resolves to one of them."""
    named = {"white": "#ffffff", "black": "#000000"}
    colour = named.get(colour, colour)
    if colour.startswith("#"):
        channels = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    else:
        channels = [float(v) for v in colour[colour.index("(") + 1:colour.index(")")].split(",")[:3]]
    linear = [c / 255 / 12.92 if c / 255 <= 0.03928 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(text: str, background: str) -> float:
    """WCAG 2 contrast ratio (1 to 21; AA asks 4.5 for text)."""
    light, dark = sorted((relative_luminance(text), relative_luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def resolved_texts(full: go.Figure) -> list[tuple[str, float, str]]:
    """(what, font size, colour) of every text a laid-out figure draws: its title, the tick labels and titles of its
    visible axes, its legend, annotations and colour bars."""
    layout = full.layout
    texts = [("title", layout.title.font.size, layout.title.font.color)] if layout.title.text else []
    for name in (n for n in layout if n.startswith(("xaxis", "yaxis"))):
        axis = layout[name]
        if axis.visible is not False and axis.showticklabels is not False:
            texts.append((f"{name} tick labels", axis.tickfont.size, axis.tickfont.color))
        if axis.visible is not False and axis.title.text:
            texts.append((f"{name} title", axis.title.font.size, axis.title.font.color))
    if layout.showlegend:
        texts.append(("legend", layout.legend.font.size, layout.legend.font.color))
    texts += [(f"annotation {a.text[:20]!r}", a.font.size, a.font.color) for a in layout.annotations]
    for trace in full.data:
        bar = getattr(trace, "colorbar", None) if getattr(trace, "showscale", False) else None
        if bar is not None:
            texts += [("colour bar tick labels", bar.tickfont.size, bar.tickfont.color)]
            texts += [("colour bar title", bar.title.font.size, bar.title.font.color)] if bar.title.text else []
    return texts


def assert_projector_text(texts: list[tuple[str, float, str]], background: str, where: str) -> None:
    """Tick labels and other text at least 14 px, titles at least 16 px, every text at least 4.5:1 on the figure."""
    assert texts, where
    for what, size, colour in texts:
        minimum = 16 if what.endswith("title") else 14
        assert size >= minimum, (where, what, size)
        assert contrast_ratio(colour, background) >= 4.5, (where, what, colour, background)


def test_the_theme_text_colour_reads_at_aa_contrast_on_the_figure_background() -> None:
    from fl_core.figures import FIGURE_BACKGROUND, TEXT_COLOR

    assert contrast_ratio(TEXT_COLOR, FIGURE_BACKGROUND) >= 12  # #31333f on white: 12.6:1
    assert contrast_ratio("rgb(128, 132, 149)", "white") < 4.5  # Streamlit's chart grey, which it replaces: 3.7:1


@pytest.mark.slow
def test_an_energy_a_channel_axes_and_a_master_key_figure_read_on_a_projector_as_plotly_lays_them_out() -> None:
    """The bar (classroom3): fonts and colours as plotly.js resolves them (kaleido), in the report's look too."""
    from .figure_gallery import channel_axes_figures, first_layer_figures, master_key_figures

    figures = {"energy profile": first_layer_figures()["profile"],
               "channel axes": channel_axes_figures()["axes_scatter"],
               "master keys": master_key_figures()["key_filters"]}
    for name, fig in figures.items():
        for look, shown in (("dashboard", fig), ("report", standalone(fig))):
            full = shown.full_figure_for_development(warn=False)
            assert_projector_text(resolved_texts(full), full.layout.paper_bgcolor, f"{name} ({look})")


@pytest.mark.slow
def test_every_figure_of_every_family_sets_projector_fonts() -> None:
    for name, fig in gallery().items():
        texts = [("title", fig.layout.title.font.size, fig.layout.title.font.color)]
        for axis_name, axis in axes(fig).items():
            texts += [(f"{axis_name} tick labels", axis.tickfont.size, axis.tickfont.color),
                      (f"{axis_name} title", axis.title.font.size, axis.title.font.color)]
        texts += [(f"annotation {a.text[:20]!r}", a.font.size, a.font.color) for a in fig.layout.annotations]
        assert_projector_text(texts, fig.layout.paper_bgcolor, name)


def test_the_theme_takes_traces_without_a_colour_scale_and_styles_those_with_one() -> None:
    """A box or violin marker has no colour bar (the theme once asked it for one and every such figure failed)."""
    for trace in (go.Box(x=[1.0, 2.0, 3.0]), go.Violin(x=[1.0, 2.0]), go.Bar(x=[1], y=[2])):
        assert readable(go.Figure(trace)).data[0].type == trace.type
    scaled = readable(go.Figure(go.Scatter(x=[1], y=[1], marker=dict(color=[1.0], showscale=True))))
    assert scaled.data[0].marker.colorbar.tickfont.size == TICK_FONT_PX


def test_a_log_axis_of_one_value_has_a_tick_on_it() -> None:
    """A trajectory of one snapshot put all its values at one point: the ticks divided a span of 0 (OverflowError)."""
    assert log_ticks(0.5, 0.5) == [0.5]
    assert 0.5 in log_axis(np.array([0.5, 0.5]))["tickvals"]
