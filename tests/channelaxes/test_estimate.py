"""The expected duration of a channel analysis: its work counted in the images and batched passes of each stage
through the parts of the network it runs (checked against MACs counted on the running network and against the passes
the analysis runs), timed module by module, known before a run, the same when asked twice, and within 2× of the
analysis's time on a small module (the MobileNetV2 bar is tests/test_notebook3.py)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from fl_core.channelaxes.analysis import ChannelSettings, analyze_channels
from fl_core.channelaxes.calibration import channel_data
from fl_core.channelaxes.estimate import (
    conv_macs,
    estimate_channels,
    forward_profile,
    layer_macs,
    layers_work,
    moments_macs,
    stage_passes,
    stage_work,
)
from fl_core.channelaxes.pruning import PruningSettings
from fl_core.channelaxes.settings import ChannelDataSettings
from fl_core.io.layers import conv_inventory
from fl_core.io.models import LoadedModel, load_model


def hooked_macs(model: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """MACs per image of every convolution, counted on a forward pass: weight size × output positions."""
    macs: dict[str, int] = {}
    hooks = [module.register_forward_hook(
        lambda m, _args, out, name=name: macs.__setitem__(name, m.weight.numel() * out.shape[-2] * out.shape[-1]))
        for name, module in model.named_modules() if isinstance(module, nn.Conv2d)]
    with torch.inference_mode():
        model(x)
    for hook in hooks:
        hook.remove()
    return macs


def test_stage_work_counts_the_macs_a_forward_pass_runs(demo) -> None:
    loaded = demo[0]
    size = loaded.input_config.input_size
    counted = hooked_macs(loaded.copy_model().eval(), torch.zeros(1, 3, size, size))
    inventory = conv_inventory(loaded)
    assert {lay.name: conv_macs(lay) for lay in inventory} == counted
    names = list(counted)
    layer = "features.7"
    after = sum(counted[n] for n in names[names.index(layer) + 1:])
    pruning = PruningSettings(criteria=("l1", "random"), fractions=(0.25, 0.5), finetune_steps=3, finetune_batch=4)
    settings = ChannelSettings(layer=layer, lesion_kinds=("mean",), pruning=pruning)
    conv = inventory[names.index(layer)]
    channels = conv.out_channels
    work = stage_work(loaded, layer, 40, 10, settings, init=True, labels=True)
    total = sum(counted.values())
    moments = 2 * conv.output_size ** 2 * channels ** 2  # two C×C Gram matrices over the layer's positions per image
    assert moments_macs(conv) == moments
    assert work == {"labels": 50 * total, "statistics": 40 * (total + moments), "interventions": channels * 10 * after,
                    "pruning": 4 * (10 * after + 3 * 3 * 4 * total),
                    "initialization": 2 * 40 * (total + moments)}  # the BatchNorm recalibration pass, then statistics
    seeds = replace(settings, init_seeds=3, init_recalibrate=False)
    assert stage_work(loaded, layer, 40, 10, seeds, init=True)["initialization"] == 3 * 40 * (total + moments)
    assert set(stage_work(loaded, layer, 40, 10, ChannelSettings(layer=layer, lesion_kinds=(), pruning=None))) == {
        "statistics", "interventions"}

    # several layers analysed together: the shared passes once, each layer's lesions and pruning curves summed
    late = "features.14"
    both = layers_work(loaded, [layer, late], 40, 10, settings, init=True, labels=True)
    alone = [stage_work(loaded, name, 40, 10, settings, init=True, labels=True) for name in (layer, late)]
    assert {stage: both[stage] for stage in ("labels", "statistics", "initialization")} == {
        stage: alone[0][stage] for stage in ("labels", "statistics", "initialization")}
    assert both["interventions"] == alone[0]["interventions"] + alone[1]["interventions"]
    assert both["pruning"] == alone[0]["pruning"] + alone[1]["pruning"]


@pytest.mark.slow
def test_the_passes_counted_are_the_passes_the_analysis_runs(demo) -> None:
    loaded = demo[0]
    data = channel_data(loaded, "crops", n_calibration=24, n_evaluation=20)
    for settings in (ChannelSettings(layer="features.7", cluster_seeds=2, pruning=None, batch_size=8),
                     ChannelSettings(layer="features.14", cluster_seeds=2, pruning=None, memory_mb=2)):
        result = analyze_channels(loaded, data, settings, device="cpu", progress=False)
        layers = conv_inventory(loaded)
        start = [lay.name for lay in layers].index(settings.layer)
        counted = stage_passes(layers, start, loaded.input_config.input_size, 24, 20, settings, torch.device("cpu"))
        assert counted["interventions"] == result.interventions.effects.passes, settings
        assert counted["statistics"] == -(-24 // settings.batch_size)


def heavy_head_net() -> nn.Module:
    """One small convolution, then a large dense head: nearly all of its time is after its only convolution."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 32 * 32, 4096),
                         nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))


def test_the_profile_times_what_has_no_macs(monkeypatch) -> None:
    from fl_core.io.preprocessing import InputConfig

    loaded = LoadedModel.from_module(heavy_head_net(), InputConfig(input_size=32))
    costs = forward_profile(loaded, "cpu").costs
    assert layer_macs(loaded).after_layer(0) == 0  # the dense head has no convolution MACs ...
    assert costs.after_layer(0) > costs.conv[0]  # ... but takes most of the time


@pytest.mark.slow
def test_the_estimate_is_known_before_the_run_and_reported_first(demo) -> None:
    loaded = demo[0]
    estimate = estimate_channels(loaded, layer="features.7")  # the crops are labelled by the photos: no labels stage
    default = stage_work(loaded, "features.7", ChannelDataSettings.n_calibration, ChannelDataSettings.n_evaluation,
                         ChannelSettings())
    assert set(estimate.stages) == set(default) and estimate.seconds == pytest.approx(sum(estimate.stages.values()))
    assert estimate.macs_per_second > 0 and estimate.text().startswith("about ")
    assert "forward passes" in estimate.basis and "assumes the machine stays" in estimate.basis
    data = channel_data(loaded, "crops", n_calibration=32, n_evaluation=16)
    messages: list[tuple[float, str]] = []
    settings = ChannelSettings(layer="features.7", cluster_seeds=2, pruning=None)
    analyze_channels(loaded, data, settings, device="cpu", progress=lambda f, m: messages.append((f, m)))
    expected = [m for f, m in messages if m.endswith(" expected")]
    assert len(expected) == 1 and expected[0].startswith("features.7: about ")
    assert all(f == 0.0 for f, m in messages[:messages.index((0.0, expected[0])) + 1])  # before any stage


@pytest.mark.slow
def test_crops_labelled_by_the_networks_decisions_count_that_pass() -> None:
    imagenet = load_model("demo:mobilenet_v2")
    estimate = estimate_channels(imagenet, layer="features.16.conv.2")
    assert "labels" in estimate.stages and estimate.stages["labels"] > 0
    data = channel_data(load_model("demo:tiny_vgg"), "crops", n_calibration=16, n_evaluation=8)
    assert "labels" not in estimate_channels("demo:tiny_vgg", data, layer="features.7").stages


def two_convolutions() -> nn.Module:
    """The bar's small user module: two convolutions and a linear head."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


@pytest.mark.slow
def test_a_small_modules_estimate_is_quick_steady_and_within_2x_of_its_analysis() -> None:
    net = two_convolutions()
    images, labels = torch.rand(64, 3, 32, 32), torch.randint(0, 10, (64,))
    data = channel_data(net, TensorDataset(images, labels), n_calibration=32, n_evaluation=32)
    first = estimate_channels(net, data)
    start = time.perf_counter()
    second = estimate_channels(net, data)
    assert time.perf_counter() - start < 1.0
    assert second.seconds == pytest.approx(first.seconds, rel=0.1)
    start = time.perf_counter()
    analyze_channels(net, data, progress=False)
    actual = time.perf_counter() - start
    assert actual / 2 <= first.seconds <= 2 * actual, (first.stages, actual)


def test_layers_pruned_together_add_whole_networks_evaluated_and_recovered(demo) -> None:
    loaded = demo[0]
    pruning = PruningSettings(criteria=("local", "l1"), fractions=(0.5,), flops_targets=(0.1, 0.2, 0.3),
                              recovery_steps=7, finetune_batch=4)
    settings = ChannelSettings(lesion_kinds=(), pruning=pruning)
    layers = ["features.4", "features.7"]
    work = layers_work(loaded, layers, 32, 16, settings)
    total = 9 * 32 * 32 * 32 * 3 + 9 * 32 * 64 * 16 * 16 + 9 * 64 * 64 * 16 * 16 + 9 * 64 * 128 * 8 * 8 \
        + 9 * 128 * 128 * 8 * 8  # the small VGG's five convolutions, by hand
    assert work["network pruning"] == 2 * 3 * (2 * 16 + 3 * 7 * 4) * total  # criteria × targets × (eval + recovery)
    assert "network pruning" not in layers_work(loaded, layers, 32, 16, replace(settings, pruning=replace(
        pruning, flops_targets=())))
