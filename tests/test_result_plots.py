"""Every result draws itself: ``result.plot(kind)`` returns a plotly figure made by the family's own figure function,
plotly imported only when a figure is asked for."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import plotly.graph_objects as go
import pytest

import fl_core
from fl_core import AnalysisError, ArgumentError, analyze_energy, analyze_master_keys, analyze_scale_space
from fl_core.results import Result

BANK = "demo:ppocrv6_det_small_dw7"


def all_result_classes() -> list[type[Result]]:
    for module in pkgutil.walk_packages(fl_core.__path__, "fl_core."):
        if not module.name.startswith(("fl_core.cli", "fl_core.__main__")):
            importlib.import_module(module.name)
    found, todo = [], [Result]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return [cls for cls in found if cls.__module__.startswith("fl_core") and cls is not Result]


@pytest.mark.slow
def test_every_figure_kind_names_a_figure_function_of_the_family():
    classes = all_result_classes()
    drawn = [cls for cls in classes if cls.figure_kinds()]
    assert len(drawn) >= 15
    for cls in drawn:
        for kind, path in cls._figures.items():
            module, function = path.split(":")
            assert module.endswith(".plots") and module.startswith(cls.__module__.rsplit(".", 1)[0]), (cls, kind)
            assert callable(getattr(importlib.import_module(module), function)), (cls, kind)
    family_results = {name for names in fl_core.PUBLIC_API.values() for name in names if name.endswith("Result")}
    assert family_results <= {cls.__name__ for cls in drawn}


@pytest.mark.slow
def test_master_keys_draw_every_listed_figure_with_no_argument_and_refuse_unknown_kinds():
    result = analyze_master_keys(BANK, k=4, restarts=1)
    assert result.plot_kinds() == ("centroids", "composition", "members", "stages", "layers")  # no sweep ran
    for kind in result.plot_kinds():
        figure = result.plot(kind)
        assert isinstance(figure, go.Figure) and figure.data, kind
    assert result.plot().layout.title.text == result.plot("centroids").layout.title.text  # the first is the default
    with pytest.raises(AnalysisError, match="sweep="):
        result.plot("sweep")
    with pytest.raises(ArgumentError, match="'centroids', 'composition'"):
        result.plot("histogram")
    swept = analyze_master_keys(BANK, k=4, restarts=1, sweep=(2, 3))
    assert swept.plot_kinds()[-1] == "sweep" and swept.plot("sweep").data


@pytest.mark.slow
def test_clusters_are_numbered_from_1_in_the_table_the_figures_and_members():
    result = analyze_master_keys(BANK, k=4, restarts=1)
    table = result.cluster_frame()
    assert table["cluster"].tolist() == [1, 2, 3, 4] and set(result.to_frame()["cluster"]) == {1, 2, 3, 4}
    first, last = result.plot("members"), result.plot("members", cluster=4)
    assert first.layout.title.text.startswith("Cluster 1: ") and f"of its {table['size'][0]} filters" in (
        first.layout.title.text)
    assert last.layout.title.text.startswith("Cluster 4: ") and f"of its {table['size'][3]} filters" in (
        last.layout.title.text)
    assert len(result.members(4, count=10_000)) == table["size"][3]
    for wrong in (0, 5, "1"):
        with pytest.raises(ArgumentError, match="numbered 1 to 4"):
            result.members(wrong)


@pytest.mark.slow
def test_a_channel_analysis_lists_only_the_figures_its_settings_computed(demo):
    from fl_core import analyze_channels, channel_data

    loaded = demo[0]
    data = channel_data(loaded, "crops", n_calibration=24, n_evaluation=8)
    bare = analyze_channels(loaded, data, layer="features.7", lesion_kinds=(), pruning=None, cluster_seeds=2,
                            device="cpu", progress=False)
    assert bare.plot_kinds() == ("axes", "correlations", "filter", "claims")
    for kind in bare.plot_kinds():
        assert isinstance(bare.plot(kind), go.Figure), kind
    assert bare.plot("filter").layout.title.text.startswith("Channel 0")  # the index column of to_frame() counts from 0
    refused = {"pruning": "pruning=PruningSettings", "lesions": "lesion_kinds", "peers": "lesion_kinds"}
    for kind, reason in refused.items():
        with pytest.raises(AnalysisError, match=reason):
            bare.plot(kind)


@pytest.mark.slow
def test_energy_and_scale_space_draw_their_figures(photos):
    energy = analyze_energy(["demo:tiny_vgg", "demo:tiny_vgg_init"], photos.subset(range(2)), seeds=2)
    for kind in energy.plot_kinds():
        assert isinstance(energy.plot(kind), go.Figure), kind
    profile = energy.plot(log_y=False)  # keywords reach the figure function
    assert profile.layout.yaxis.type != "log"
    assert isinstance(energy.models[0].plot().data[0], go.Image)  # a model's filter tiles
    fits = analyze_scale_space(method="C2")
    assert "C2" in {trace.legendgroup for trace in fits.plot("sigma").data}
    assert len(fits.plot("models").layout.annotations) == 8


@pytest.mark.slow
def test_plotly_is_imported_only_when_a_figure_is_drawn():
    code = ("import sys, fl_core; r = fl_core.analyze_scale_space(); assert 'plotly' not in sys.modules; "
            "f = r.plot(); print(type(f).__name__, 'plotly' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Figure", "True"]
