"""The figure pieces every family shares (fl_core/figures.py): colours, filter tiles, heatmaps, offline HTML."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from fl_core.figures import diverging_rgb, figure_html, filter_rgb, heatmap_figure, tile_mosaic, tiles_figure


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


def test_tiles_are_drawn_large_enough_to_see_small_kernels():
    fig = tiles_figure(np.ones((4, 3, 3, 3)), "four filters")
    image = fig.data[0]
    assert isinstance(image, go.Image) and fig.layout.title.text == "four filters"
    assert np.asarray(image.z).shape[0] >= 2 * 24  # 3×3 kernels upsampled 8×


def test_a_heatmap_labels_its_cells_and_leaves_missing_values_blank():
    matrix = np.array([[1.0, 0.25], [np.nan, 1.0]])
    fig = heatmap_figure(matrix, ["a", "b"], "r")
    heat = fig.data[0]
    assert heat.text[0][1] == "0.25" and heat.text[1][0] == ""
    assert (heat.zmin, heat.zmax) == (-1.0, 1.0) and list(heat.x) == ["a", "b"]
    assert heatmap_figure(np.eye(8), list("abcdefgh"), "r").layout.height > fig.layout.height


def test_a_figure_downloads_as_one_offline_html_file():
    html = figure_html(go.Figure(go.Scatter(x=[1, 2], y=[3, 4])))
    assert html.lstrip().lower().startswith("<!doctype html>") and "Plotly.newPlot" in html
    assert "<script src=" not in html and len(html) > 1_000_000  # plotly.js inlined, no network needed
