"""Several layers pruned together to FLOPs targets: the targets against PyTorch's own FLOP count, every point against
the whole pruned network, the AUCs' bootstrap against resamples drawn by hand, coupled layers pruned once."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.comparison import auc_accuracy_vs_flops
from fl_core.channelaxes.pruner import NetworkPruner
from fl_core.channelaxes.pruning import (
    PruningSettings,
    auc_intervals,
    auc_text,
    evaluate_model,
    layer_counts,
    lowest_first,
    prune_network,
)
from fl_core.channelaxes.site import default_pruned_layers
from fl_core.errors import AnalysisError, ArgumentError
from fl_core.io.layers import conv_inventory
from fl_core.io.models import load_model

CPU = torch.device("cpu")
LAYERS = ("features.4", "features.7")  # features.7 also reads features.4: the MACs removed are not additive


def pytorch_macs(model: torch.nn.Module, x: torch.Tensor) -> int:
    """MACs of one image by PyTorch's own FLOP counter (2 FLOPs per multiply-accumulate)."""
    with FlopCounterMode(display=False) as flops, torch.inference_mode():
        model(x[:1])
    return flops.get_total_flops() // 2


@pytest.fixture(scope="module")
def images() -> LabelledInputs:
    generator = torch.Generator().manual_seed(5)
    return LabelledInputs(x=torch.randn(24, 3, 32, 32, generator=generator),
                          y=torch.randint(0, 11, (24,), generator=generator))


def test_auc_intervals_are_the_auc_of_images_drawn_by_hand() -> None:
    rng = np.random.default_rng(1)
    correct = {"a": rng.random((4, 30)) < 0.7, "b": rng.random((4, 30)) < 0.5}
    correct = {k: v.astype(float) for k, v in correct.items()}
    flops = [0.0, 0.3, 0.1, 0.2]  # unsorted on purpose
    intervals = auc_intervals(flops, correct, resamples=50, seed=3, differences=[("a", "b")])
    for name, k in correct.items():
        assert intervals[name].estimate == pytest.approx(auc_accuracy_vs_flops(flops, k.mean(1)))
    for r in (0, 17, 49):  # the resample's images, drawn as resample_weights draws them
        drawn = np.random.default_rng([3, 0]).integers(0, 30, (50, 30))[r]
        by_hand = {name: auc_accuracy_vs_flops(flops, k[:, drawn].mean(1)) for name, k in correct.items()}
        for name in correct:
            assert intervals[name].values[r] == pytest.approx(by_hand[name])
        assert intervals["a-b"].values[r] == pytest.approx(by_hand["a"] - by_hand["b"])
    low, high = intervals["a"].interval
    assert low < intervals["a"].estimate < high
    assert auc_text(61.234, [58.0, 64.06], 64) == "61.2 pp [58.0, 64.1], n = 64"


@pytest.mark.slow
def test_layers_pruned_together_reach_each_flops_target_alike_for_every_criterion(demo, images) -> None:
    loaded = demo[0]
    rng = np.random.default_rng(0)
    axis_scores = {layer: {"local": rng.random(64), "target": rng.random(64)} for layer in LAYERS}
    settings = PruningSettings(criteria=("local", "target", "l1", "bn_gamma", "random"),
                               flops_targets=(0.1, 0.3, 0.95), recovery_steps=3, finetune_batch=8)
    result = prune_network(loaded.copy_model().eval(), LAYERS, images, images, axis_scores, settings, device=CPU,
                           batch_size=8, resamples=40, seed=0)
    x, _ = images.head(24)
    base = pytorch_macs(loaded.model, x)
    assert result.macs[0] == base and result.layers == list(LAYERS) and result.skipped == {}
    assert result.targets == [0.1, 0.3] and result.unreachable == [0.95]  # each layer keeps one channel
    whole = NetworkPruner(loaded.copy_model().eval(), LAYERS, x[:1])
    for target, point, macs, flops in zip(result.targets, result.channels_removed[1:], result.macs[1:],
                                          result.flops_removed[1:]):
        pruned = whole.pruned_copy({layer: range(n) for layer, n in point.items()}).model
        assert macs == pytorch_macs(pruned, x) and flops == pytest.approx(1 - macs / base)
        assert flops >= target  # reached ...
        fewer = {layer: max(n - 1, 0) for layer, n in point.items()}  # ... by the least common fraction
        assert pytorch_macs(whole.pruned_copy({k: range(n) for k, n in fewer.items()}).model, x) > (1 - target) * base
        assert point == layer_counts(whole, max(point.values()) / 64)
    for name, curve in result.curves.items():  # every point equals the whole pruned network's own forward pass
        scores = axis_scores if name in ("local", "target") else None
        for point, accuracy in zip(result.channels_removed[1:], curve.accuracy[1:]):
            if scores is None:
                break
            channels = {layer: lowest_first(scores[layer][name], n) for layer, n in point.items()}
            pruned = whole.pruned_copy(channels).model
            assert evaluate_model(pruned, images, CPU, batch_size=8)[1] == pytest.approx(accuracy)
        assert curve.accuracy[0] == result.base_accuracy
        assert len(curve.accuracy_recovered) == 3 and curve.auc_recovered_pp is not None
        assert curve.auc_pp == pytest.approx(100 * auc_accuracy_vs_flops(result.flops_removed, curve.accuracy))
        assert curve.auc_pp_ci[0] <= curve.auc_pp <= curve.auc_pp_ci[1]
    difference = result.differences["auc"]["local_minus_target_pp"]
    assert difference == pytest.approx(result.curves["local"].auc_pp - result.curves["target"].auc_pp)
    assert set(result.differences) == {"auc", "recovered"}
    assert result.n_images == 24 and result.recovery_images == 24


@pytest.mark.slow
def test_folded_batchnorm_is_refused_with_the_reason_and_coupled_layers_pruned_once(images) -> None:
    """The shipped MobileNetV2's BatchNorms are identities (TFLite folded them into the convolutions): BN |γ| ranks
    no channel, so it is skipped, naming the layer and why. A depthwise conv loses its channels with the expansion
    that feeds it: it is pruned through that one."""
    loaded = load_model("torchvision:mobilenet_v2")
    model = loaded.copy_model().eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            torch.nn.init.ones_(module.weight)
    layers = ("features.2.conv.0.0", "features.2.conv.1.0", "features.16.conv.2")
    x = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    data = LabelledInputs(x=x, y=torch.arange(8))
    settings = PruningSettings(criteria=("l1", "bn_gamma"), flops_targets=(0.05,), recovery_steps=0)
    result = prune_network(model, layers, data, data, {}, settings, device=CPU, batch_size=8)
    assert result.layers == ["features.2.conv.0.0", "features.16.conv.2"]
    assert any("features.2.conv.1.0 loses its channels with features.2.conv.0.0" in n for n in result.notes)
    assert "folded into the convolution" in result.skipped["bn_gamma"] and set(result.curves) == {"l1"}
    assert result.curves["l1"].accuracy_recovered is None and result.recovery_steps == 0
    with pytest.raises(AnalysisError, match="FLOPs target"):
        prune_network(model, layers, data, data, {}, PruningSettings(), device=CPU)


@pytest.mark.slow
def test_the_command_prunes_its_layers_together_and_claim_4_reads_the_paired_difference(tmp_path) -> None:
    from fl_core.cli import main

    out = tmp_path / "pruned.json"
    assert main(["channels", "--model", "demo:tiny_vgg", "--layer", "features.4", "--layer", "features.7",
                 "--calibration", "32", "--evaluation", "16", "--lesions", "--criteria", "local", "target", "l1",
                 "--fractions", "0.5", "--flops-targets", "0.1", "0.3", "--recovery-steps", "1", "--cluster-seeds",
                 "2", "--bootstrap", "40", "--permutations", "99", "--json", str(out), "--quiet"]) == 0
    payload = json.loads(out.read_text())
    network = payload["network_pruning"]
    assert network["layers"] == ["features.4", "features.7"] and network["n_images"] == 16
    assert network["targets"] == [0.1, 0.3] and all(f >= t for f, t in zip(network["flops_removed"][1:], [0.1, 0.3]))
    assert set(network["curves"]) == {"local", "target", "l1"} and network["recovery_steps"] == 1
    recovered = network["differences"]["recovered"]
    claim = payload["claims"][3]
    assert claim["measured"] == pytest.approx(recovered["local_minus_target_pp"])
    assert [claim["ci_low"], claim["ci_high"]] == pytest.approx(recovered["ci"])
    assert "2 layers pruned together to 10%, 30%" in claim["why"] and "--flops-targets 0.1 0.3" in claim["command"]
    assert "n = 16" in claim["why"] or "16 evaluation images" in claim["why"]


def test_a_sweep_with_its_layers_pruned_together_saves_loads_and_plots_whole(tmp_path) -> None:
    import fl_core
    from fl_core.channelaxes.calibration import channel_data
    from fl_core.channelaxes.sweep import sweep_channels

    data = channel_data("demo:tiny_vgg", "crops", 32, 16)
    settings = PruningSettings(criteria=("local", "target"), fractions=(0.5,), flops_targets=(0.1, 0.3),
                               recovery_steps=0)
    result = sweep_channels("demo:tiny_vgg", data, layers=["features.4", "features.7"], lesion_kinds=(),
                            cluster_seeds=2, bootstrap=20, permutations=19, pruning=settings)
    back = fl_core.load_result(result.save(tmp_path / "sweep.zip"))
    assert back.network_pruning.curves["local"].auc_pp == result.network_pruning.curves["local"].auc_pp
    figure = back.plot("network_pruning")
    curve = result.network_pruning.curves["local"]
    assert figure.data[0].name == f"local axis (AUC {auc_text(curve.auc_pp, curve.auc_pp_ci, 16)})"
    assert list(figure.data[0].x) == pytest.approx([100 * f for f in result.network_pruning.flops_removed])
    assert "network pruning" in result.timings


@pytest.mark.slow
def test_pruning_the_layers_alone_equals_the_sweeps_pruning_and_its_table_reads_the_curves() -> None:
    """:func:`prune_layers` skips the lesions, one-layer curves and intervals of a sweep: the same statistics pass
    ranks the same channels, so every accuracy, AUC and interval is the sweep's."""
    from fl_core.channelaxes.calibration import channel_data
    from fl_core.channelaxes.sweep import prune_layers, sweep_channels

    data = channel_data("demo:tiny_vgg", "crops", 32, 16)
    pruning = PruningSettings(criteria=("local", "target", "l1"), fractions=(0.5,), flops_targets=(0.1, 0.3),
                              recovery_steps=1, finetune_batch=8)
    options = dict(layers=["features.4", "features.7"], cluster_seeds=2, bootstrap=30, permutations=19,
                   pruning=pruning)
    swept = sweep_channels("demo:tiny_vgg", data, lesion_kinds=(), **options).network_pruning
    alone = prune_layers("demo:tiny_vgg", data, **options)
    assert alone.curves == swept.curves and alone.differences == swept.differences
    assert alone.flops_removed == swept.flops_removed and alone.channels_removed == swept.channels_removed
    frame = alone.to_frame().set_index("criterion")
    assert list(frame.index) == ["local axis", "target axis", "L1 norm", "local − target"]
    for curve in alone.curves.values():
        row = frame.loc[curve.label]
        assert [row.auc_pp, row.auc_pp_low, row.auc_pp_high] == pytest.approx([curve.auc_pp, *curve.auc_pp_ci])
        assert row.auc_recovered_pp == pytest.approx(curve.auc_recovered_pp)
    difference = frame.loc["local − target"]
    assert [difference.auc_recovered_pp, difference.auc_recovered_pp_low, difference.auc_recovered_pp_high] == \
        pytest.approx([alone.differences["recovered"]["local_minus_target_pp"], *alone.differences["recovered"]["ci"]])
    assert (frame["n_images"] == 16).all() and (frame["flops_targets"] == "0.1, 0.3").all()
    with pytest.raises(ArgumentError, match="flops_targets"):
        prune_layers("demo:tiny_vgg", data, layers=["features.4"], pruning=PruningSettings())


@pytest.mark.slow
def test_the_default_layers_pruned_together_are_the_expansions_before_depthwise_convolutions() -> None:
    mobilenet = conv_inventory(load_model("demo:mobilenet_v2"))
    expansions = default_pruned_layers(mobilenet)
    assert expansions == [f"features.{i}.conv.0.0" for i in range(2, 18)]  # block 1 has none: the first conv feeds it
    tiny = conv_inventory(load_model("demo:tiny_vgg"))
    assert default_pruned_layers(tiny) == [lay.name for lay in tiny[1:]]  # no depthwise: every conv after the first
