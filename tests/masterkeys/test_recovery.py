"""Swap → recover → re-score: BatchNorm statistics matching, frozen swapped filters, the disjoint split, the zero-layer
control, the per-layer sweep, the CLI's `recovered` keys, and the cached model untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from fl_core.channelaxes.pruning import batched_logits
from fl_core.cli import main
from fl_core.errors import DataError
from fl_core.io.images import ImageSet, iter_input_batches
from fl_core.io.models import LoadedModel
from fl_core.io.preprocessing import InputConfig
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.layersweep import sweep_layers, theory_share
from fl_core.masterkeys.plots import layer_sweep_figure, scores_figure
from fl_core.masterkeys.recovery import RecoverySettings, recover_swap, split_calibration
from fl_core.masterkeys.rescore import rescore
from fl_core.masterkeys.swap import swap_filters, swapped_model
from fl_core.networks.batchnorm import recalibrate_batchnorm

CPU = torch.device("cpu")
CLASSES = ("a", "b", "c", "d")
HEAD_GAIN = 30.0
CONFIG = InputConfig(input_size=12, crop_pct=1.0, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))


class TinyBatchNormNet(nn.Module):
    """stem → BN → ReLU → depthwise 3×3 → BN → ReLU → pointwise → BN → ReLU → depthwise 3×3 → BN → ReLU → pool →
    linear (the MobileNet pattern in miniature)."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.dw1 = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.pw, self.bn2 = nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels)
        self.dw2 = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels, len(CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.dw1(torch.relu(self.bn0(self.stem(x))))))
        x = torch.relu(self.bn3(self.dw2(torch.relu(self.bn2(self.pw(x))))))
        return self.head(x.mean(dim=(2, 3)))


def noise_images(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (12, 12, 3), dtype=np.uint8) for _ in range(n)]


def planted_world(n: int = 120, folded: bool = False) -> tuple[LoadedModel, ImageSet]:
    """A tiny BN depthwise net whose BatchNorms hold its data's statistics (``folded``: identities with the statistics
    folded into the convolutions, as in the MobileNetV2 fixture), and images labelled with its own predictions."""
    torch.manual_seed(1)
    model = TinyBatchNormNet()
    arrays = noise_images(n)
    plain = ImageSet([(lambda a=a: Image.fromarray(a), -1, f"img{i}") for i, a in enumerate(arrays)])
    x = torch.cat([x for x, _ in iter_input_batches(plain, CONFIG, batch_size=n)])
    model.train()
    for norm in (model.bn0, model.bn1, model.bn2, model.bn3):
        norm.momentum = None
    with torch.no_grad():
        model(x)  # running statistics = the data's
        if folded:
            for conv, norm in ((model.stem, model.bn0), (model.dw1, model.bn1), (model.pw, model.bn2),
                               (model.dw2, model.bn3)):
                scale = norm.weight / (norm.running_var + norm.eps).sqrt()
                conv.weight.mul_(scale.view(-1, 1, 1, 1))
                norm.bias.copy_(norm.bias - norm.running_mean * scale)
                norm.weight.fill_(1.0)
                norm.running_mean.zero_()
                norm.running_var.fill_(1.0 - norm.eps)
    model = model.eval().requires_grad_(False)
    with torch.no_grad():
        model.head.weight.mul_(HEAD_GAIN)  # confident predictions, which a swap can change
        labels = model(x).argmax(1).tolist()
    items = [(lambda a=a: Image.fromarray(a), label, f"{CLASSES[label]}/img{i}.png")
             for i, (a, label) in enumerate(zip(arrays, labels))]
    loaded = LoadedModel(spec="test:tiny_bn_dw", label="tiny BN depthwise net", model=model,
                         state_dict=model.state_dict(), input_config=CONFIG, class_names=CLASSES)
    return loaded, ImageSet(items, classes=CLASSES, description=f"{n} planted noise images")


def decoded(images: ImageSet) -> torch.Tensor:
    return torch.cat([x for x, _ in iter_input_batches(images, CONFIG, batch_size=len(images))])


def norm_outputs(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each BatchNorm's output, from hooks (an independent measurement)."""
    seen = {}
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: seen.__setitem__(name, out))
               for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("folded", [False, True])
def test_batchnorm_statistics_match_the_original_and_the_intact_network_is_a_fixed_point(folded):
    loaded, images = planted_world(folded=folded)
    x = decoded(images)
    swap = swap_filters(depthwise_bank(loaded), "B")
    model = swapped_model(loaded, swap)
    assert recalibrate_batchnorm(model, loaded.forward_copy(CPU), [x], CPU) == 4
    reference, matched = norm_outputs(loaded.model, x), norm_outputs(model, x)
    for name, out in reference.items():  # every BatchNorm's output has the original's mean and variance per channel
        torch.testing.assert_close(matched[name].mean((0, 2, 3)), out.mean((0, 2, 3)), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(matched[name].var((0, 2, 3)), out.var((0, 2, 3)), atol=1e-4, rtol=1e-3)
    intact = loaded.copy_model()
    recalibrate_batchnorm(intact, loaded.forward_copy(CPU), x.split(40), CPU)
    torch.testing.assert_close(intact(x), loaded.model(x), atol=1e-4, rtol=1e-4)
    if folded:  # plain recalibration (PyTorch's train-mode statistics) would break the folded network
        plain = loaded.copy_model().train()
        for norm in (m for m in plain.modules() if isinstance(m, nn.BatchNorm2d)):
            norm.reset_running_stats()
            norm.momentum = None
        with torch.no_grad():
            plain(x)
        assert not torch.allclose(plain.eval()(x), loaded.model(x), atol=1e-2)


@pytest.mark.slow
def test_recovery_trains_everything_but_the_frozen_swapped_filters():
    loaded, images = planted_world()
    x = decoded(images)
    swap = swap_filters(depthwise_bank(loaded), "B")
    before = swapped_model(loaded, swap).state_dict()
    teacher = batched_logits(loaded.model, x, CPU, 64)
    model, recalibrated = recover_swap(loaded, swap, x, teacher, RecoverySettings(steps=5, lr=0.01, batch=16), CPU)
    after = model.state_dict()
    assert recalibrated == 4
    for key, filters in swap.weights.items():  # frozen bit for bit at the idealized filters
        assert torch.equal(after[key], filters.reshape(after[key].shape)), key
    trained = ["stem.weight", "pw.weight", "head.weight", "bn1.weight", "bn3.bias", "bn2.running_mean"]
    for key in trained:
        assert not torch.equal(after[key], before[key]), key


def test_calibration_and_held_out_images_never_overlap_and_the_split_is_seeded():
    _, images = planted_world(n=40)
    calibration, held_out = split_calibration(images, 15, seed=3)
    assert (len(calibration), len(held_out)) == (15, 25)
    assert not set(calibration.names) & set(held_out.names)
    assert sorted(calibration.names + held_out.names) == sorted(images.names)
    assert split_calibration(images, 15, seed=3)[0].names == calibration.names
    assert split_calibration(images, 15, seed=4)[0].names != calibration.names
    with pytest.raises(DataError, match="leave none"):
        split_calibration(images, 40, seed=0)
    twice = ImageSet([*images.subset([0])._items, *images.subset([0, 1, 2])._items], images.classes)
    with pytest.raises(DataError, match="both calibration and held-out"):
        split_calibration(twice, 2, seed=0)


@pytest.mark.slow
def test_recovered_swaps_score_better_on_held_out_images_and_keep_stays_the_original():
    loaded, images = planted_world()
    bank = depthwise_bank(loaded)
    settings = RecoverySettings(steps=20, calibration=60, batch=16, seed=2)
    result = rescore(loaded, images, swaps=[swap_filters(bank, "B"), swap_filters(bank, "keep")], batch_size=64,
                     workers=0, recovery=settings)
    swapped, kept = result.swaps
    assert result.n_images == 60 and result.recovery.n_held_out == 60 and result.recovery.n_calibration == 60
    assert result.recovery.settings.seed == 2 and result.recovery.frozen == (2, 2)
    assert result.top1 == 1.0  # the labels are the original's predictions
    assert swapped.loss > result.loss + 0.1  # the swap hurts ...
    assert swapped.recovered.loss < swapped.loss - 0.03 and swapped.recovered.kl < 0.8 * swapped.kl  # ... less after
    assert swapped.recovered.steps == 20
    assert kept.recovered.loss == pytest.approx(result.loss, abs=1e-4) and kept.recovered.kl < 1e-6  # a fixed point
    frame = result.to_frame()
    assert list(frame["method"]) == ["original", "B", "keep"]
    assert frame["recovered_top1"].iloc[1] == swapped.recovered.top1
    assert result.to_dict()["swaps"][0]["recovered"]["steps"] == 20
    bars = {trace.name: list(trace.y) for trace in scores_figure(result).data}
    assert bars["top-1 after recovery"][1:] == [swapped.recovered.top1, kept.recovered.top1]


def plain_scores(model: nn.Module, original: nn.Module, images: ImageSet) -> tuple[float, float]:
    """(mean cross-entropy, mean KL(p_original ‖ p_model)) by a plain loop."""
    x, y = decoded(images), torch.tensor(images.labels)
    with torch.no_grad():
        logp, reference = F.log_softmax(model(x), 1), F.log_softmax(original(x), 1)
    return float(F.nll_loss(logp, y)), float((reference.exp() * (reference - logp)).sum(1).mean())


@pytest.mark.slow
def test_zeroing_one_depthwise_layer_is_that_lesion_exactly():
    loaded, images = planted_world(n=40)
    zero = swap_filters(depthwise_bank(loaded), "zero", layers=["dw2"])
    model = swapped_model(loaded, zero)
    assert torch.count_nonzero(model.dw2.weight) == 0 and torch.equal(model.dw1.weight, loaded.model.dw1.weight)
    assert zero.layers[0].relative_error == pytest.approx(1.0)
    lesioned = loaded.copy_model()
    with torch.no_grad():
        lesioned.dw2.weight.zero_()
    loss, kl = plain_scores(lesioned, loaded.model, images)
    scored = rescore(loaded, images, swaps=[zero], batch_size=64, workers=0).swaps[0]
    assert scored.loss == pytest.approx(loss, rel=1e-4) and scored.kl == pytest.approx(kl, rel=1e-3, abs=1e-6)


@pytest.mark.slow
def test_the_sweep_has_one_row_per_depthwise_layer_and_the_theory_share_of_its_kl():
    loaded, images = planted_world(n=40)
    bank = depthwise_bank(loaded)
    sweep = sweep_layers(loaded, images, replacement="B", batch_size=64, workers=0)
    frame = sweep.to_frame()
    assert list(frame["layer"]) == [layer.name for layer in bank.layers] == ["dw1", "dw2"]
    assert {"swapped_top1", "zeroed_top1", "swapped_kl", "zeroed_kl", "theory_share"} <= set(frame)
    for row in sweep.rows:
        alone = swapped_model(loaded, swap_filters(bank, "B", layers=[row.layer]))
        lesioned = swapped_model(loaded, swap_filters(bank, "zero", layers=[row.layer]))
        swapped_kl, zeroed_kl = plain_scores(alone, loaded.model, images)[1], plain_scores(lesioned, loaded.model,
                                                                                            images)[1]
        assert row.swapped.kl == pytest.approx(swapped_kl, rel=1e-3, abs=1e-6)
        assert row.theory_share == pytest.approx(1 - swapped_kl / zeroed_kl, rel=1e-3, abs=1e-4)
        assert row.recovered_theory_share is None
    assert theory_share(0.2, 0.0) is None
    assert sweep.to_dict()["rows"][0]["layer"] == "dw1"
    figure = layer_sweep_figure(sweep)
    assert [trace.name for trace in figure.data] == ["layer zeroed (lesion control)", "layer swapped by B"]
    assert list(figure.data[1].y) == [row.swapped.top1 for row in sweep.rows]


def snapshot(loaded: LoadedModel) -> dict[str, tuple[torch.Tensor, int]]:
    return {key: (tensor.clone(), tensor.data_ptr()) for key, tensor in loaded.model.state_dict().items()}


@pytest.mark.slow
def test_recovery_and_the_sweep_never_touch_the_cached_model():
    loaded, images = planted_world(n=40, folded=True)
    before = snapshot(loaded)
    settings = RecoverySettings(steps=3, calibration=20, lr=0.01, batch=8)
    swept = sweep_layers(loaded, images, replacement="B", recovery=settings, batch_size=64, workers=0)
    assert all(row.swapped.recovered is not None and row.recovered_theory_share is not None for row in swept.rows)
    assert swept.n_images == 20
    for key, tensor in loaded.model.state_dict().items():
        assert torch.equal(tensor, before[key][0]) and tensor.data_ptr() == before[key][1], key
    assert not any(p.requires_grad for p in loaded.model.parameters()) and not loaded.model.training
    assert len(layer_sweep_figure(swept).data) == 3  # zeroed, swapped, swapped and recovered


@pytest.mark.slow
def test_cli_rescore_json_has_recovered_scores(tmp_path, capsys):
    out = tmp_path / "recovered.json"
    assert main(["rescore", "--model", "timm:mobilenetv2_100", "--input-size", "32", "--images", "bundled",
                 "--swap", "B", "--recover-steps", "2", "--calibration", "5", "--recover-batch", "4",
                 "--seed", "1", "--workers", "0", "--quiet", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["n_images"] == 6 and data["recovery"]["n_calibration"] == 5
    assert data["recovery"]["settings"] == {"steps": 2, "calibration": 5, "lr": 1e-3, "batch": 4,
                                            "recalibrate_batchnorm": True, "seed": 1}
    for swap in data["swaps"]:
        assert {"steps", "top1", "top5", "loss"} <= set(swap["recovered"]) and swap["recovered"]["steps"] == 2
    assert "held-out images" in capsys.readouterr().out
    assert main(["rescore", "--model", "timm:mobilenetv2_100", "--input-size", "32", "--images", "bundled",
                 "--swap", "B", "--recover-steps", "1", "--calibration", "11", "--quiet"]) == 2  # nothing left to score
    sweep = tmp_path / "sweep.json"
    assert main(["rescore", "--model", "timm:mobilenetv2_100", "--input-size", "32", "--images", "bundled", "--sweep",
                 "--stage", "1", "--workers", "0", "--quiet", "--json", str(sweep)]) == 0
    rows = json.loads(sweep.read_text())["rows"]
    assert rows and all(row["stage"] == 1 and row["zeroed"]["method"] == "zero" for row in rows)


@pytest.mark.slow
def test_matching_the_batchnorm_statistics_recovers_the_real_mobilenet_swapped_by_b(mobilenet, imagenet_sample):
    """The fixture's BatchNorms are identities (folded TFLite export): the statistics matching must still hold."""
    from fl_core.io.images import folder_images

    from .test_rescore import readme_preprocessing

    loaded = readme_preprocessing(mobilenet)
    settings = RecoverySettings(steps=0, calibration=32, batch=16)
    result = rescore(loaded, folder_images(imagenet_sample, limit=64),
                     swaps=[swap_filters(depthwise_bank(loaded), "B")], batch_size=32, workers=0, recovery=settings)
    swapped = result.swaps[0]
    assert result.n_images == 32 and result.recovery.batchnorm_layers == 52 and result.recovery.frozen == (17,)
    assert result.top1 >= 0.6 and swapped.top1 <= 0.15  # 78.1 % and 4.0 % on 744 held-out images (docs/results.md)
    assert swapped.recovered.top1 >= swapped.top1 + 0.15 and swapped.recovered.kl < 0.5 * swapped.kl


def test_rescore_recovery_options_come_from_the_recovery_settings():
    import argparse

    from fl_core.cli import rescore as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command._recovery(parser.parse_args(["--model", "x"])) is None  # no --recover-steps: no recovery
    args = parser.parse_args(["--model", "x", "--seed", "3", "--recover-steps", "0", "--calibration", "8",
                              "--recover-lr", "0.01", "--recover-batch", "4", "--no-batchnorm-recalibration"])
    assert command._recovery(args) == RecoverySettings(steps=0, calibration=8, lr=0.01, batch=4,
                                                       recalibrate_batchnorm=False, seed=3)
    assert command._recovery(parser.parse_args(["--model", "x", "--recover-steps", "5"])) == RecoverySettings(steps=5)
