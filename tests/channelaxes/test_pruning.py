"""Structured pruning: reused Torch-Pruning criteria against their formulas, physical removal against masking,
FLOPs-matched curves and their AUC."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.comparison import auc_accuracy_vs_flops
from fl_core.channelaxes.pruner import LayerPruner
from fl_core.channelaxes.pruning import (
    CRITERIA,
    PruningSettings,
    evaluate_model,
    lowest_first,
    prune_curves,
    ranking,
    recovery_finetune,
    removal_counts,
)
from fl_core.channelaxes.site import locate_site
from fl_core.errors import AnalysisError, ArgumentError
from fl_core.io.cifar import cifar_resnet
from fl_core.io.models import load_model
from fl_core.networks.evaluation import evaluate_classifier

from .planted_nets import duplicate_world

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_inputs() -> LabelledInputs:
    generator = torch.Generator().manual_seed(2)
    return LabelledInputs(x=torch.randn(12, 3, 32, 32, generator=generator),
                          y=torch.randint(0, 11, (12,), generator=generator))


@pytest.mark.slow
def test_torch_pruning_baselines_are_the_published_formulas(demo, tiny_inputs) -> None:
    model = demo[0].copy_model()
    pruner = LayerPruner(model, "features.4", tiny_inputs.head(1)[0])
    w = model.get_submodule("features.4").weight.detach().double().flatten(1)

    def score(name: str, seed: int = 0) -> np.ndarray:
        return pruner.importance(name, tiny_inputs, CPU, gradient_images=12, seed=seed)

    np.testing.assert_allclose(score("l1"), w.abs().sum(1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(score("l2"), w.square().sum(1).numpy(), rtol=1e-5)
    gamma = model.get_submodule("features.5").weight.detach().double().abs()
    np.testing.assert_allclose(score("bn_gamma"), gamma.numpy(), rtol=1e-5)
    magnitudes = w.square()
    np.testing.assert_allclose(score("fpgm"), torch.cdist(magnitudes, magnitudes).sum(1).numpy(), rtol=1e-4)

    reference = demo[0].copy_model().requires_grad_(True)
    x, y = tiny_inputs.head(12)
    F.cross_entropy(reference(x), y).backward()
    conv = reference.get_submodule("features.4")
    taylor = (conv.weight * conv.weight.grad).abs().flatten(1).sum(1).detach().double().numpy()
    np.testing.assert_allclose(score("taylor"), taylor, rtol=1e-4)
    assert all(p.grad is None for p in model.parameters())  # gradients do not leak into pruned copies

    assert np.array_equal(score("random", seed=3), score("random", seed=3))
    assert not np.array_equal(score("random", seed=3), score("random", seed=4))


@pytest.mark.slow
def test_physical_removal_equals_zeroing_the_channels_and_leaves_the_template(demo, tiny_inputs) -> None:
    model = demo[0].copy_model()
    pruner = LayerPruner(model, "features.7", tiny_inputs.head(1)[0])
    channels = [1, 8, 40, 63]
    pruned = pruner.pruned_copy(channels).model.eval()
    assert pruned.get_submodule("features.7").out_channels == 60
    assert pruned.get_submodule("features.8").num_features == 60
    assert pruned.get_submodule("features.11").in_channels == 60
    assert model.get_submodule("features.7").out_channels == 64 and pruner.coupled_layers() == []

    def zero(_module, _args, output):
        output = output.clone()
        output[:, channels] = 0
        return output

    x = tiny_inputs.head(12)[0]
    handle = model.get_submodule("features.9").register_forward_hook(zero)  # (the copy shares this module: its
    with torch.inference_mode():                                               # hooks would fire there too)
        masked = model(x)
    handle.remove()
    with torch.inference_mode():
        removed = pruned(x)
    torch.testing.assert_close(removed, masked, rtol=1e-4, atol=1e-5)
    (base_macs, base_params), (macs, params) = pruner.cost(model), pruner.cost(pruned)
    assert base_macs - macs == 4 * (64 * 9 * 16 * 16 + 128 * 9 * 8 * 8)  # the channels' own filters + the next conv's
    assert base_params - params == 4 * (64 * 9 + 2 + 128 * 9)  # (+ their BatchNorm's weight and bias)
    for network, counted in ((model, base_macs), (pruned, macs)):
        with FlopCounterMode(display=False) as flops, torch.inference_mode():
            network(x[:1])
        assert 2 * counted == flops.get_total_flops()  # PyTorch's own count of the convolutions' and linear FLOPs


@pytest.mark.slow
def test_residual_partners_are_pruned_together() -> None:
    model = load_model("torchvision:resnet18").copy_model()
    x = torch.zeros(1, 3, 64, 64)
    assert LayerPruner(model, "layer1.0.conv1", x).coupled_layers() == []
    coupled = LayerPruner(load_model("torchvision:resnet18").copy_model(), "layer1.0.conv2", x).coupled_layers()
    assert {"conv1", "layer1.1.conv2"} <= set(coupled)


@pytest.mark.slow
def test_one_evaluation_loop_gives_the_whole_set_loss_and_accuracy_and_keeps_the_mode(demo, tiny_inputs) -> None:
    model = demo[0].copy_model().train()
    x, y = tiny_inputs.head(len(tiny_inputs))
    with torch.inference_mode():
        logits = model.eval()(x)
    model.train()
    loss, accuracy = evaluate_classifier(model, tiny_inputs.batches(5), CPU)  # batches of 5, 5 and 2
    assert loss == pytest.approx(float(F.cross_entropy(logits, y)), rel=1e-6)
    assert accuracy == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    assert model.training  # eval mode for the pass only
    assert evaluate_model(model, tiny_inputs, CPU, batch_size=4) == pytest.approx((loss, accuracy), rel=1e-6)
    assert not model.training  # the pruning evaluation leaves its networks in eval mode
    with pytest.raises(AnalysisError, match="Labels go up to 11"):
        evaluate_classifier(model, [(x, torch.full_like(y, 11))], CPU)
    with pytest.raises(AnalysisError, match="no images"):
        evaluate_classifier(model, [], CPU)


def test_removal_grid_and_ranking() -> None:
    assert removal_counts(10, (0.0, 0.125, 0.25, 0.26, 1.0)) == [1, 2, 3, 9]
    with pytest.raises(AnalysisError):
        removal_counts(1, (0.5,))
    assert lowest_first(np.array([0.3, np.nan, 0.1, 0.1, 2.0]), 3) == [0, 2, 3]  # NaN is never pruned first
    assert lowest_first(np.array([0.3, np.nan, 0.1, 0.1, 2.0]), 5) == [0, 1, 2, 3, 4]


def test_a_criterion_that_scores_every_channel_the_same_is_refused_with_the_reason() -> None:
    """The shipped MobileNetV2 has its BatchNorms folded (every |γ| = 1): its BN |γ| curve removed channels in index
    order, and the correlation heatmap drew a blank row for it."""
    scores = np.array([0.5, 2.0, 1.0])
    assert ranking(scores, CRITERIA["l1"], "conv") is scores
    with pytest.raises(AnalysisError, match=r"same BN \|γ\| \(1\).*folded into the convolution"):
        ranking(np.ones(4), CRITERIA["bn_gamma"], "features.16.conv.2")


@pytest.mark.slow
def test_curves_are_flops_matched_with_auc_and_fine_tune() -> None:
    loaded, data = duplicate_world(n_calibration=200, n_evaluation=200)
    before = {k: v.clone() for k, v in loaded.state_dict.items()}
    scores = {"peer_r2": -np.array([0.0, 1.0, 1.0, 0.0, 0.0])}
    settings = PruningSettings(criteria=("peer_r2", "l1", "random"), fractions=(0.2, 0.4), finetune_steps=15,
                               finetune_lr=0.05, finetune_batch=50)
    template = loaded.copy_model()
    result = prune_curves(template, "conv", data.calibration, data.evaluation, scores, settings, device=CPU)
    assert all(torch.equal(before[k], v) for k, v in template.state_dict().items())  # copies share, never train, it
    assert result.channels_removed == [0, 1, 2] and result.skipped == {}
    assert np.all(np.diff(result.macs) < 0) and result.flops_removed[0] == 0.0
    for curve in result.curves.values():
        assert curve.flops_removed == result.flops_removed  # same FLOPs for every criterion
        assert curve.accuracy[0] == result.base_accuracy == 1.0
        assert curve.auc == pytest.approx(auc_accuracy_vs_flops(curve.flops_removed, curve.accuracy))
        assert len(curve.accuracy_finetuned) == 3 and curve.auc_finetuned is not None
    assert result.curves["peer_r2"].removed[1] == [1]  # the most replaceable channel goes first
    l1 = result.curves["l1"]
    assert l1.removed[1] == [0]  # L1 ranks the box filters (norm 1) below the random ones (≈ 2.4)
    for curve in result.curves.values():  # removal also drops the channel's mean (+1): the fine-tune recovers it
        assert all(tuned > plain + 0.2 for tuned, plain in zip(curve.accuracy_finetuned[1:], curve.accuracy[1:]))
    assert all(torch.equal(before[k], v) for k, v in loaded.state_dict.items())
    with pytest.raises(ArgumentError, match="criteria must be one of local, target"):
        PruningSettings(criteria=("magic",))  # refused where the settings are built, before any pruning


@pytest.mark.slow
def test_mean_compensated_removal_acts_like_mean_ablation() -> None:
    loaded, data = duplicate_world(n_calibration=200, n_evaluation=200)
    model = loaded.copy_model()
    x, _ = data.evaluation.head(200)
    pruner = LayerPruner(model, "conv", x[:1])
    means = np.array([0.9, 1.1, 1.2, 0.8, 1.05])
    pruned = pruner.pruned_copy([1, 3], means=means, readers=("head",)).model.eval()
    assert pruned.head.in_channels == 3

    def mean_ablate(_module, _args, output):
        output = output.clone()
        output[:, [1, 3]] = torch.tensor([1.1, 0.8])[:, None, None]
        return output

    handle = model.relu.register_forward_hook(mean_ablate)  # (shared with the copy: run it alone)
    with torch.inference_mode():
        expected = model(x)
    handle.remove()
    with torch.inference_mode():
        removed = pruned(x)
    torch.testing.assert_close(removed, expected, rtol=1e-5, atol=1e-4)  # exact: the reader is a 1×1 conv

    settings = PruningSettings(criteria=("peer_r2",), fractions=(0.2,), finetune_steps=0)
    scores = {"peer_r2": -np.array([0.0, 1.0, 1.0, 0.0, 0.0])}
    kept = prune_curves(loaded.copy_model(), "conv", data.calibration, data.evaluation, scores, settings,
                        device=CPU, means=np.ones(5), readers=("head",))
    zeroed = prune_curves(loaded.copy_model(), "conv", data.calibration, data.evaluation, scores,
                          PruningSettings(criteria=("peer_r2",), fractions=(0.2,), finetune_steps=0,
                                          compensate_mean=False), device=CPU, means=np.ones(5), readers=("head",))
    assert kept.curves["peer_r2"].accuracy[1] > zeroed.curves["peer_r2"].accuracy[1] + 0.3
    assert "folded into head" in kept.notes[0] and "switched off" in zeroed.notes[0]


@pytest.mark.slow
def test_recovery_fine_tune_leaves_the_intact_network_unchanged() -> None:
    """The fine-tune distils the intact network: with nothing pruned it is a fixed point, so it can only pull a pruned
    copy back toward the original (hard labels would move it)."""
    loaded, data = duplicate_world(n_calibration=64, n_evaluation=8)
    x, _ = data.calibration.head(64)
    with torch.no_grad():
        teacher = loaded.model(x)
    settings = PruningSettings(finetune_steps=20, finetune_lr=0.01, finetune_batch=16)
    for target, should_move in ((teacher, False), (torch.roll(teacher, 1, dims=1), True)):
        model = recovery_finetune(loaded.copy_model().eval(), x, target, settings, CPU)
        same = all(torch.allclose(loaded.state_dict[k], v, atol=1e-5) for k, v in model.state_dict().items())
        assert same != should_move


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "layer", "size", "start"), [
    ("demo:tiny_vgg", "features.14", 32, "pool"),  # the reader is the linear head, after pooling and flattening
    ("demo:tiny_vgg", "features.7", 32, "features.11"),
    pytest.param("torchvision:resnet18", "layer1.0.conv2", 64, "layer1.0", marks=pytest.mark.slow),  # + the stem
    pytest.param("torchvision:squeezenet1_0", "features.12.expand3x3", 64, "classifier.1", marks=pytest.mark.slow),
    pytest.param("torchvision:squeezenet1_0", "features.12.squeeze", 64, "features.12", marks=pytest.mark.slow),
    pytest.param("torchvision:mobilenet_v2", "features.16.conv.2", 64, "features.15", marks=pytest.mark.slow),
])
def test_pruned_networks_scored_from_their_first_reader_equal_whole_forward_passes(spec, layer, size, start) -> None:
    """The speed-up against the slow path: every point of every curve equals evaluating the whole pruned network."""
    loaded = load_model(spec)
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(10, 3, size, size, generator=generator)
    evaluation = LabelledInputs(x=x, y=torch.randint(0, loaded.num_classes, (10,), generator=generator))
    model = loaded.copy_model()
    site = locate_site(model, layer, x[:1])
    means = np.linspace(0.1, 1.0, site.n_channels)
    readers = site.consumers if site.foldable else ()
    settings = PruningSettings(criteria=("l1", "random"), fractions=(0.25, 0.5), finetune_steps=0)
    result = prune_curves(model, layer, evaluation, evaluation, {}, settings, device=CPU, means=means,
                          readers=readers, batch_size=4)
    assert result.computed_from == start and len(result.notes) == 1  # (the note on mean compensation)
    whole = LayerPruner(loaded.copy_model(), layer, x[:1])
    for curve in result.curves.values():
        for channels, loss, accuracy in zip(curve.removed[1:], curve.loss[1:], curve.accuracy[1:]):
            pruned = whole.pruned_copy(channels, means, readers).model
            assert evaluate_model(pruned, evaluation, CPU, batch_size=4) == pytest.approx((loss, accuracy), rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "layer"), [
    ("torchvision:resnet18", "layer2.0.conv2"),  # coupled with the downsample and the next blocks (residual)
    ("torchvision:mobilenet_v2", "features.15.conv.2"),  # a residual stream of three blocks
    ("torchvision:squeezenet1_0", "features.12.expand3x3"),  # concatenated, read at an offset
    ("torchvision:densenet121", "features.denseblock1.denselayer2.conv2"),  # concatenated into every later layer
])
def test_a_removal_is_torch_prunings_group_of_the_removed_channels(spec: str, layer: str) -> None:
    pruner = LayerPruner(load_model(spec).copy_model().eval(), layer, torch.zeros(1, 3, 64, 64))

    def plain(items) -> list:
        return sorted((id(item.dep.target.module), item.dep.handler.__name__, sorted(zip(item.idxs, item.root_idxs)))
                      for item in items)

    rng = np.random.default_rng(0)
    for count in (1, 3, pruner.n_channels // 2):
        channels = sorted(rng.choice(pruner.n_channels, count, replace=False).tolist())
        traced = pruner.graph.get_pruning_group(pruner.conv, pruner.group[0].dep.handler, idxs=channels)
        assert plain(pruner.removals(channels)) == plain(traced)
    assert pruner.removals([]) == []


@pytest.mark.slow
def test_pruning_through_option_a_shortcuts_equals_zeroing_the_channels() -> None:
    """A CIFAR ResNet's stem feeds the residual stream of stage 1 and, through the zero-padding shortcut, channels
    8-23 of stage 2: removing stem channels for real equals zeroing them wherever the stream carries them."""
    model = cifar_resnet("resnet20").eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.bias.data.uniform_(-0.3, 0.3)
    x, removed = torch.randn(4, 3, 32, 32), [0, 3, 5]

    def zero(module, inputs, output):
        output = output.clone()
        output[:, removed] = 0
        return output

    for layer, carriers in (("conv1", ["bn1", *(f"layer1.{j}.bn2" for j in range(3))]),
                            ("layer2.0.conv2", ["layer2.0.shortcut", *(f"layer2.{j}.bn2" for j in range(3))])):
        pruned = LayerPruner(model, layer, x[:1]).pruned_copy(removed).model(x)
        hooks = [model.get_submodule(name).register_forward_hook(zero) for name in carriers]
        zeroed = model(x)
        for hook in hooks:
            hook.remove()
        assert torch.allclose(pruned, zeroed, atol=1e-5), layer
        assert not torch.allclose(model(x), zeroed, atol=1e-3)
