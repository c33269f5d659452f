"""Re-scoring: agreement with a plain torchvision loop on real fixtures, swaps on the real MobileNetV2, class
mapping, resuming, and torchrun with two gloo processes giving the numbers of one."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn
from torchvision import transforms

from fl_core.cli import main
from fl_core.errors import DataError
from fl_core.io.images import TransformedImages, bundled_images, folder_images, threaded_batches
from fl_core.io.models import load_model
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.rescore import fold_batchnorm, folded_patch, rescore
from fl_core.masterkeys.swap import parameter_patch, swap_filters, swapped_model

from .test_clustering import tiny_loaded

REPO = Path(__file__).resolve().parents[2]


def readme_preprocessing(loaded):
    """Resize 256 + CenterCrop 224 as in the fixture READMEs (torchvision's MobileNetV2 preset resizes to 232)."""
    return dataclasses.replace(loaded, input_config=loaded.input_config.with_overrides(crop_pct=224 / 256))


@pytest.mark.slow
def test_squeezenet_matches_a_plain_torchvision_loop(squeezenet, imagenet_sample):
    images = folder_images(imagenet_sample, limit=24)
    result = rescore(squeezenet, images, replacements=(), batch_size=24, workers=0)
    assert result.n_images == 24 and "wnids" in result.classes and not result.warnings
    normalize = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    tree = torchvision.datasets.ImageFolder(imagenet_sample, transforms.Compose(
        [transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(), normalize]))
    picks = np.linspace(0, len(tree) - 1, 24).round().astype(int).tolist()
    top1 = top5 = 0
    loss = 0.0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(torch.utils.data.Subset(tree, picks), batch_size=24):
            logits = squeezenet.model(x)
            loss += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
            top = logits.topk(5, dim=1).indices
            top1 += int((top[:, 0] == y).sum())
            top5 += int((top == y[:, None]).any(dim=1).sum())
    assert (result.top1, result.top5) == (top1 / 24, top5 / 24)
    assert result.loss == pytest.approx(loss / 24, rel=1e-5)


@pytest.mark.slow
def test_mobilenet_original_vs_every_swap(mobilenet, imagenet_sample):
    loaded = readme_preprocessing(mobilenet)
    bank = depthwise_bank(loaded)
    names = ["A", "B", "C1", "C2", "D1", "D2", "random", "keep"]
    swaps = [swap_filters(bank, name) for name in names]
    result = rescore(loaded, folder_images(imagenet_sample, limit=8), swaps=swaps, batch_size=8, workers=0)
    scores = {s.method: s for s in result.swaps}
    assert result.n_images == 8 and result.top1 >= 0.6  # README: 78.7 % on all 1000 images
    assert scores["keep"].top1 == result.top1 and scores["keep"].loss == pytest.approx(result.loss, rel=1e-9)
    assert scores["keep"].agreement == 1.0 and scores["keep"].kl == pytest.approx(0.0, abs=1e-9)
    assert scores["random"].top1 <= 0.1 and scores["random"].relative_error > 1.2
    for name in names[:6]:  # all 17 layers at once, no fine-tuning: measured, not assumed (see the report)
        assert scores[name].top1 <= result.top1 and scores[name].loss > result.loss
        assert scores[name].kl > 0 and 0.3 < scores[name].relative_error < 0.5
        assert scores[name].delta_top1 == pytest.approx(scores[name].top1 - result.top1)
    assert scores["random"].loss > max(scores[name].loss for name in names[:6])


@pytest.mark.slow
def test_folding_batchnorm_keeps_the_outputs_and_swaps_the_same_filters():
    loaded = load_model("torchvision:mobilenet_v2")  # random init; its BatchNorms get trained-like statistics
    model = loaded.copy_model().eval()
    generator = torch.Generator().manual_seed(0)
    for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        for tensor in (bn.running_mean, bn.weight, bn.bias):
            tensor.data = torch.randn(tensor.shape, generator=generator) * 0.5
        bn.running_var.data = torch.rand(bn.running_var.shape, generator=generator) + 0.5
    loaded = dataclasses.replace(loaded, model=model, state_dict=model.state_dict())
    folded = loaded.copy_model().eval()
    x = torch.randn(2, 3, 64, 64, generator=generator)
    scales = fold_batchnorm(folded, x)
    assert len(scales) == 52 and not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    with torch.no_grad():
        assert torch.allclose(folded(x), model(x), rtol=1e-4, atol=1e-4)
        swap = swap_filters(depthwise_bank(loaded), "B")
        for key, tensor in folded_patch(parameter_patch(folded, swap), scales).items():
            folded.get_parameter(key).copy_(tensor)
        assert torch.allclose(folded(x), swapped_model(loaded, swap)(x), rtol=1e-4, atol=1e-4)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())  # the original is untouched
    timm_model = load_model("timm:mobilenetv2_100").copy_model().eval()  # BatchNormAct2d: BN + ReLU6 in one module
    with torch.no_grad():
        reference = timm_model(x)
        assert len(fold_batchnorm(timm_model, x)) == 52
        assert torch.allclose(timm_model(x), reference, rtol=1e-4, atol=1e-4)


def test_a_conv_output_read_twice_is_not_folded():
    class ReadTwice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)
            self.bn.running_mean.fill_(0.5)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    model = ReadTwice().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        before = model(x)
        assert fold_batchnorm(model, x) == {}  # the pair is found, but folding would change the sum: undone
        assert isinstance(model.bn, torch.nn.BatchNorm2d) and torch.equal(model(x), before)


def tiny_tree(root: Path) -> Path:
    """An ImageFolder tree of bundled photos in the tiny model's four classes (2 images each)."""
    photos = bundled_images()
    for i, cls in enumerate(("a", "b", "c", "d")):
        (root / cls).mkdir(parents=True)
        for j in range(2):
            photos.image(2 * i + j).resize((48, 48)).save(root / cls / f"{j}.png")
    return root


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_numbers(tmp_path):
    loaded = tiny_loaded(seed=6)
    images = folder_images(tiny_tree(tmp_path / "tree"))
    swaps = [swap_filters(depthwise_bank(loaded), name) for name in ("B", "random")]
    uninterrupted = rescore(loaded, images, swaps=swaps, batch_size=2, workers=0)
    assert uninterrupted.classes.startswith("All ") and "by name)" in uninterrupted.classes
    calls = []

    def stop_after_two_batches(fraction: float, message: str) -> None:
        calls.append(message)
        if len(calls) == 2:
            raise KeyboardInterrupt

    resume = tmp_path / "sums.json"
    with pytest.raises(KeyboardInterrupt):
        rescore(loaded, images, swaps=swaps, batch_size=2, workers=0, resume=resume, progress=stop_after_two_batches)
    assert json.loads(resume.read_text())["done"] == 4 and "ETA" in calls[0]
    resumed = rescore(loaded, images, swaps=swaps, batch_size=2, workers=0, resume=resume)
    assert resumed.resumed_images == 4
    for key in ("n_images", "top1", "top5", "loss"):
        assert getattr(resumed, key) == pytest.approx(getattr(uninterrupted, key), rel=1e-12)
    for a, b in zip(resumed.swaps, uninterrupted.swaps):
        assert a.method == b.method and a.n_images == b.n_images == 8
        assert (a.top1, a.top5, a.loss, a.agreement, a.kl) == pytest.approx((b.top1, b.top5, b.loss, b.agreement, b.kl))
    assert rescore(loaded, images, swaps=swaps, batch_size=2, workers=0, resume=resume).resumed_images == 8
    other = [swap_filters(depthwise_bank(loaded), "random", seed=9)]  # other weights: refused, the file kept
    before = resume.read_bytes()
    with pytest.raises(DataError, match="resume file of another model, image set or set of swaps"):
        rescore(loaded, images, swaps=other, batch_size=2, workers=0, resume=resume)
    assert resume.read_bytes() == before


def test_unlabelled_photos_give_agreement_only():
    loaded = tiny_loaded(seed=7)
    swaps = [swap_filters(depthwise_bank(loaded), name) for name in ("keep", "random")]
    result = rescore(loaded, bundled_images(), swaps=swaps, batch_size=4, workers=0)
    assert result.top1 is None and result.loss is None and "unlabelled" in result.classes
    keep, random = result.swaps
    assert keep.agreement == 1.0 and keep.kl == 0.0 and keep.top1 is None
    assert random.kl > 0
    assert result.to_frame()["method"].tolist() == ["original", "keep", "random"]


def test_inside_a_daemonic_process_the_images_are_decoded_by_threads_to_the_same_numbers(tmp_path, monkeypatch):
    """A Dask worker is a daemonic process, which Python forbids to start children: DataLoader worker processes there
    failed every re-score of more than one batch ("daemonic processes are not allowed to have children")."""
    import multiprocessing
    import threading

    loaded = tiny_loaded(seed=8)
    images = folder_images(tiny_tree(tmp_path / "tree"))
    swaps = [swap_filters(depthwise_bank(loaded), "random")]
    in_process = rescore(loaded, images, swaps=swaps, batch_size=3, workers=0)
    decoders = set()
    transform = TransformedImages.__getitem__
    monkeypatch.setattr(TransformedImages, "__getitem__",
                        lambda self, index: decoders.add(threading.current_thread().name) or transform(self, index))
    monkeypatch.setitem(multiprocessing.current_process()._config, "daemon", True)  # as in a Dask worker
    in_threads = rescore(loaded, images, swaps=swaps, batch_size=3, workers=2)  # 8 images: 3 batches
    assert in_threads.n_images == 8 and decoders and all(name.startswith("fl-decode") for name in decoders)
    for key in ("top1", "top5", "loss"):
        assert getattr(in_threads, key) == pytest.approx(getattr(in_process, key), rel=1e-12)
    assert in_threads.swaps[0].kl == pytest.approx(in_process.swaps[0].kl, rel=1e-9)


def test_threaded_batches_are_the_data_loaders_in_order_and_stop_early_without_waiting():
    dataset = torch.utils.data.TensorDataset(torch.arange(23.0)[:, None], torch.arange(23))
    expected = list(torch.utils.data.DataLoader(dataset, batch_size=5))
    batches = list(threaded_batches(dataset, 5, threads=3))
    assert len(batches) == len(expected) == 5
    for (x, y), (ex, ey) in zip(batches, expected):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    stopped = threaded_batches(dataset, 5, threads=2)
    assert torch.equal(next(stopped)[1], expected[0][1])
    stopped.close()  # the pool is shut down: no thread keeps decoding for nobody


@pytest.mark.slow
def test_two_gloo_processes_give_the_numbers_of_one(mobilenet, imagenet_sample, tmp_path):
    path = mobilenet.spec.partition("=")[2]
    arguments = ["rescore", "--model", f"torchvision:mobilenet_v2={path}", "--mean", "0.5", "0.5", "0.5", "--std",
                 "0.5", "0.5", "0.5", "--input-size", "112", "--crop-pct", "0.875", "--images", str(imagenet_sample),
                 "--max-images", "12", "--swap", "B", "--swap", "random", "--batch-size", "3", "--workers", "0",
                 "--quiet"]  # 112 px: the processes' start-up, not the forward passes, is what is tested
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "fl_core", *arguments, "--json", str(tmp_path / "two.json")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert main([*arguments, "--json", str(tmp_path / "one.json")]) == 0
    two, one = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("two", "one"))
    assert (two["world_size"], one["world_size"]) == (2, 1)
    assert two["n_images"] == one["n_images"] == 12
    assert (two["top1"], two["top5"]) == (one["top1"], one["top5"])
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)
    for a, b in zip(two["swaps"], one["swaps"]):
        assert set(a) >= {"method", "top1", "top5", "loss"}
        assert (a["method"], a["top1"], a["top5"], a["agreement"]) == (b["method"], b["top1"], b["top5"],
                                                                        b["agreement"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert done.stdout.count("variants") == 1  # one report, from rank 0


def test_shards_cover_every_image_once_and_one_process_keeps_its_own_sums():
    from fl_core.masterkeys.distributed import all_reduce_sums, shard_range

    shards = [shard_range(10, rank, 3) for rank in range(3)]
    assert [i for s in shards for i in s] == list(range(10)) and {len(s) for s in shards} == {3, 4}
    sums, resumed, seconds = all_reduce_sums(torch.ones(2, 7, dtype=torch.float32), 5, 1.5)
    assert sums.dtype == np.float64 and sums.shape == (2, 7) and (resumed, seconds) == (5, 1.5)


def test_recovered_scores_share_the_variant_score_fields_and_keep_the_table_columns():
    from fl_core.masterkeys.rescore import RecoveredScore, Scores, VariantScore

    scores = {"top1": 0.5, "top5": 0.75, "loss": 1.0, "delta_top1": -0.25, "agreement": 0.5, "kl": 0.1}
    variant = VariantScore(method="B", n_images=4, relative_error=0.2, recovered=RecoveredScore(steps=3, **scores),
                           **scores)
    assert isinstance(variant.recovered, Scores)
    assert variant.to_dict()["recovered"] == {"steps": 3, **scores}
    row = variant.row()
    assert list(row)[:8] == ["method", "n_images", "top1", "top5", "loss", "delta_top1", "agreement", "kl"]
    assert row["recovered_steps"] == 3 and row["recovered_top1"] == 0.5 and "recovered" not in row


@pytest.mark.slow
def test_a_folded_copy_computes_the_same_function_and_leaves_the_original_alone():
    from fl_core.networks.batchnorm import conv_batchnorm_pairs, folded_copy

    model = load_model("torchvision:mobilenet_v2").copy_model().eval()
    with torch.no_grad():  # BatchNorms that do something (random init has mean 0, variance 1)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    pairs, _ = conv_batchnorm_pairs(model, x)
    folded = folded_copy(model, pairs[-3:])
    with torch.no_grad():
        torch.testing.assert_close(folded(x), model(x), rtol=1e-4, atol=1e-4)
    assert all(isinstance(folded.get_submodule(norm), nn.Identity) for _, norm in pairs[-3:])
    assert folded.get_submodule(pairs[0][0]) is model.get_submodule(pairs[0][0])  # the rest is shared
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())


def named_tree(root: Path, imagenet_sample: Path, folders: dict[str, str]) -> Path:
    """An ImageFolder tree of ImageNet-sample images whose folders carry other names: ``{folder: wnid}`` (a wnid of
    ``None`` names an empty-handed folder: it borrows the tench image)."""
    for folder, wnid in folders.items():
        (root / folder).mkdir(parents=True)
        for photo in (imagenet_sample / (wnid or "n01440764")).iterdir():
            (root / folder / photo.name).symlink_to(photo)
    return root


def labels_csv_names(imagenet_sample: Path) -> dict[str, str]:
    """labels.csv's name of every class whose name is unique there (``great_white_shark``), by wnid."""
    rows = list(csv.DictReader((imagenet_sample / "labels.csv").open(encoding="utf-8")))
    return {row["wnid"]: row["name"] for row in rows if sum(r["name"] == row["name"] for r in rows) == 1}


@pytest.mark.slow
def test_classes_named_as_labels_csv_writes_them_are_scored(imagenet_sample, tmp_path):
    """The bar (classroom3): 40 classes in folders named with underscores give a top-1 on the demo MobileNetV2."""
    names = labels_csv_names(imagenet_sample)
    wnids = [wnid for wnid in sorted(names) if "_" in names[wnid]][:40]
    tree = named_tree(tmp_path / "tree", imagenet_sample, {names[wnid]: wnid for wnid in wnids})
    result = rescore("demo:mobilenet_v2", str(tree))
    assert result.n_images == result.n_labelled == 40 and not result.warnings
    assert result.top1 is not None and result.top1 > 0.5  # measured 0.825 (33 of 40); chance 0.001
    assert "All 40 classes" in result.classes and "ignoring case" in result.classes


@pytest.mark.slow
def test_a_partly_matching_tree_scores_the_images_it_can_and_says_how_many_it_left_out(imagenet_sample, tmp_path):
    tree = named_tree(tmp_path / "tree", imagenet_sample, {
        "tench": "n01440764", "goldfish": "n01443537", "great_white_shark": "n01484850", "dog": None, "my cat": None})
    result = rescore("demo:mobilenet_v2", str(tree), replacements=())
    assert (result.n_images, result.n_labelled) == (5, 3) and result.top1 is not None
    assert len(result.warnings) == 1 and result.warnings[0].startswith("2 of 5 images, in 2 of 5 folders")
    assert "'dog', 'my cat'" in result.warnings[0]
    assert "Accuracy on 3 of 5 images" in result.plot().layout.title.text
