"""Figures of the checkpoint report: weight statistics per layer."""

from __future__ import annotations

import numpy as np

from fl_core.io.models import load_model
from fl_core.report.plots import weight_norms_figure
from fl_core.report.weightstats import weight_statistics


def test_weight_norms_show_every_convolution_with_its_dead_and_duplicate_counts():
    stats = weight_statistics(load_model("demo:tiny_vgg"))
    frame = stats.to_frame()
    fig = weight_norms_figure(stats)
    norms, *bars = fig.data
    assert list(norms.x) == list(frame["layer"])
    np.testing.assert_allclose(np.asarray(norms.y), frame["norm_mean"])
    whisker_top = np.asarray(norms.y) + np.asarray(norms.error_y.array)
    np.testing.assert_allclose(whisker_top, frame["norm_max"])
    assert [b.name.split()[0] for b in bars] == ["dead", "duplicate", "copies"]
    assert fig.layout.yaxis.type == "log" and stats.label in fig.layout.title.text
