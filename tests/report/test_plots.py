"""Figures of the checkpoint report: weight statistics per layer."""

from __future__ import annotations

import numpy as np
import torch

from fl_core.io.checkpoints import save_state_dict
from fl_core.io.models import load_model
from fl_core.report.plots import weight_norms_figure
from fl_core.report.weightstats import weight_statistics


def test_weight_norms_show_every_convolution_and_say_when_none_has_dead_or_duplicate_filters():
    stats = weight_statistics(load_model("demo:tiny_vgg"))
    frame = stats.to_frame()
    assert not frame[["dead", "duplicates", "copies"]].fillna(0).to_numpy().any()
    fig = weight_norms_figure(stats)
    (norms,) = fig.data  # no empty panel of zero counts (it drew a -1…1 axis with nothing on it)
    assert list(norms.y) == list(frame["layer"])  # a row per layer, its name written across (not 45° on the x axis)
    np.testing.assert_allclose(np.asarray(norms.x), frame["norm_mean"])
    whisker_top = np.asarray(norms.x) + np.asarray(norms.error_x.array)
    np.testing.assert_allclose(whisker_top, frame["norm_max"])
    assert fig.layout.xaxis.type == "log" and stats.label in fig.layout.title.text
    assert "no dead, duplicate or copied filters" in fig.layout.title.text.replace("<br>", " ")
    assert "xaxis2" not in fig.layout


def test_weight_norms_count_the_dead_and_duplicate_filters_of_each_convolution(tmp_path):
    weight = torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(0))
    weight[2] = 0  # dead
    weight[5] = weight[3]  # a copy
    save_state_dict({"stem.weight": weight, "body.weight": torch.randn(16, 8, 3, 3)}, tmp_path / "flawed.pt")
    stats = weight_statistics(load_model(f"weights:{tmp_path / 'flawed.pt'}"))
    frame = stats.to_frame().fillna(0)
    assert frame["dead"].sum() == 1 and frame["copies"].sum() >= 1
    fig = weight_norms_figure(stats)
    bars = fig.data[1:]
    assert [b.name.split()[0] for b in bars] == ["dead", "duplicate", "copies"]
    for bar, column in zip(bars, ("dead", "duplicates", "copies")):
        assert list(bar.x) == list(frame[column]) and bar.xaxis == "x2" and bar.orientation == "h"
    counts = fig.layout.xaxis2  # whole filters: ticks 0, 1, 2 (plotly's 0.2 steps read "0 0 0 1 1 1" as integers)
    assert counts.rangemode == "tozero" and counts.tick0 == 0 and counts.dtick == 1


def test_a_weak_match_is_written_nearest_not_approximately_equal() -> None:
    from fl_core.masterkeys.plots import match_title

    assert match_title(4, 0.93) == "≈ key 4 (+0.93)" and match_title(2, -0.81) == "≈ key 2 (-0.81)"
    assert match_title(4, -0.11) == "nearest: key 4 (-0.11)" and "≈" not in match_title(8, 0.5)


def test_report_cells_keep_words_whole_and_shorten_hashes_with_the_full_value_on_hover() -> None:
    from fl_core.report.html import cell_html

    digest = "534d727ab11d" + "0" * 52
    assert cell_html(digest) == f'<td class="mono" title="{digest}">534d727ab11d…</td>'
    assert cell_html("features.1.conv.0.0") == "<td>features.1.conv.0.0</td>"  # never broken (td: nowrap)
    assert cell_html("energy, whitening: first layer only").startswith('<td class="words">')  # wraps between words
    assert cell_html("<b>") == "<td>&lt;b&gt;</td>" and cell_html(0.066193) == "<td>0.06619</td>"
