"""The expected duration of a channel analysis: its work counted in multiply-accumulates, checked against MACs
counted on the running network, and its seconds known before a run."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from fl_core.channelaxes.analysis import ChannelSettings, analyze_channels
from fl_core.channelaxes.calibration import channel_data
from fl_core.channelaxes.estimate import conv_macs, estimate_channels, layers_work, stage_work
from fl_core.channelaxes.pruning import PruningSettings
from fl_core.channelaxes.settings import ChannelDataSettings
from fl_core.io.layers import conv_inventory
from fl_core.io.models import load_model


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
    pruned = after + counted[layer]
    pruning = PruningSettings(criteria=("l1", "random"), fractions=(0.25, 0.5), finetune_steps=3, finetune_batch=4)
    settings = ChannelSettings(layer=layer, lesion_kinds=("mean",), pruning=pruning)
    channels = loaded.copy_model().get_submodule(layer).out_channels
    work = stage_work(loaded, layer, 40, 10, settings, init=True, labels=True)
    total = sum(counted.values())
    assert work == {"labels": 50 * total, "statistics": 40 * total, "interventions": channels * 10 * after,
                    "pruning": 4 * (10 * pruned + 3 * 3 * 4 * total),
                    "initialization": 2 * 40 * total}  # the BatchNorm recalibration pass, then the statistics pass
    seeds = replace(settings, init_seeds=3, init_recalibrate=False)
    assert stage_work(loaded, layer, 40, 10, seeds, init=True)["initialization"] == 3 * 40 * total
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


def test_the_estimate_is_known_before_the_run_and_reported_first(demo) -> None:
    loaded = demo[0]
    estimate = estimate_channels(loaded, layer="features.7")  # the crops are labelled by the photos: no labels stage
    default = stage_work(loaded, "features.7", ChannelDataSettings.n_calibration, ChannelDataSettings.n_evaluation,
                         ChannelSettings())
    assert set(estimate.stages) == set(default) and estimate.seconds == sum(estimate.stages.values()) > 0
    assert estimate.macs_per_second > 0 and estimate.text().startswith("about ")
    data = channel_data(loaded, "crops", n_calibration=32, n_evaluation=16)
    messages: list[tuple[float, str]] = []
    settings = ChannelSettings(layer="features.7", cluster_seeds=2, pruning=None)
    analyze_channels(loaded, data, settings, device="cpu", progress=lambda f, m: messages.append((f, m)))
    assert messages[0][0] == 0.0 and messages[0][1].startswith("features.7: about ")
    assert messages[0][1].endswith(" expected")


def test_crops_labelled_by_the_networks_decisions_count_that_pass() -> None:
    imagenet = load_model("demo:mobilenet_v2")
    estimate = estimate_channels(imagenet, layer="features.16.conv.2")
    assert "labels" in estimate.stages and estimate.stages["labels"] > estimate.stages["statistics"]
    data = channel_data(load_model("demo:tiny_vgg"), "crops", n_calibration=16, n_evaluation=8)
    assert "labels" not in estimate_channels("demo:tiny_vgg", data, layer="features.7").stages


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
