"""The checkpoint report: weight statistics against an independent least-squares fit, checkpoints in training order,
and the CLI's HTML file (parses, every section, offline, one plotly.js, the same numbers as its JSON)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from plotly.offline import get_plotlyjs

from fl_core.cli import main
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.images import bundled_images
from fl_core.io.layers import ConvLayer
from fl_core.io.models import load_model
from fl_core.lab.runs import SHIPPED_RUNS_DIR, load_run
from fl_core.report.build import SECTIONS, ReportSettings, build_report
from fl_core.report.html import number, report_html
from fl_core.report.series import load_series, natural_key
from fl_core.report.weightstats import layer_weight_statistics

FAST = ["--input-size", "32", "--crop-pct", "1", "--seeds", "3", "--max-images", "4", "--max-distance", "10",
        "--quiet"]


def conv(name: str, weight: torch.Tensor, kind: str = "regular") -> ConvLayer:
    return ConvLayer(name=name, kind=kind, out_channels=weight.shape[0], in_channels=weight.shape[1],
                     kernel_size=tuple(weight.shape[-2:]), weight_key=f"{name}.weight")


def lstsq_r2(filters: np.ndarray) -> np.ndarray:
    """Independent R² of each flattened filter regressed on the others (one numpy least squares per filter)."""
    flat = filters.reshape(len(filters), -1)
    out = []
    for k in range(len(flat)):
        others = np.delete(flat, k, axis=0).T
        beta = np.linalg.lstsq(others, flat[k], rcond=None)[0]
        out.append(1 - np.sum((flat[k] - others @ beta) ** 2) / np.sum(flat[k] ** 2))
    return np.array(out)


def test_a_planted_duplicate_and_a_dead_filter_are_found_from_the_weights_alone() -> None:
    weight = torch.randn(12, 3, 3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    weight[7] = 2 * weight[3] - weight[5]  # filter 7 is what filters 3 and 5 make together
    weight[9] = 0  # a dead filter
    stats = layer_weight_statistics(weight, conv("conv", weight))
    assert stats.dead == 1 and stats.non_finite == 0
    assert stats.duplicate_indices == (3, 5, 7)  # each of the three is a combination of the other two
    live = np.delete(weight.numpy(), 9, axis=0)
    expected = lstsq_r2(live)
    assert np.sum(expected >= 0.999) == 3 and stats.max_peer_r2 == pytest.approx(expected.max(), abs=1e-9)
    assert stats.copies == 0  # no single peer is parallel to another
    norms = np.linalg.norm(weight.numpy().reshape(12, -1), axis=1)
    assert stats.norm_mean == pytest.approx(norms.mean()) and stats.norm_min == 0.0


def test_peer_r2_equals_least_squares_and_is_not_reported_when_the_peers_span_the_filter_space() -> None:
    from fl_core.report.weightstats import peer_reconstruction_r2

    weight = torch.randn(10, 2, 3, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert np.allclose(peer_reconstruction_r2(weight).numpy(), lstsq_r2(weight.numpy()), atol=1e-8)
    copied = torch.cat([weight, 3 * weight[:1]])  # a scaled copy of filter 0
    stats = layer_weight_statistics(copied, conv("conv", copied))
    assert stats.copies == 2 and set(stats.duplicate_indices) == {0, 10}
    wide = torch.randn(40, 3, 3, 3, generator=torch.Generator().manual_seed(3))  # 39 peers ≥ 27 values
    assert layer_weight_statistics(wide, conv("wide", wide)).duplicates is None


def write_checkpoint(path: Path, scale: float, depthwise: bool = False, metadata: dict | None = None) -> Path:
    """A small weights-only checkpoint: an RGB 3×3 first conv that grows along one direction, a 3×3 conv, and
    optionally 32 depthwise 7×7 filters."""
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(8, 3, 3, 3, generator=generator) * 0.1
    direction = torch.randn(8, 3, 3, 3, generator=generator)
    tensors = {"stem.weight": base + scale * direction, "body.weight": torch.randn(16, 8, 3, 3, generator=generator)}
    if depthwise:
        tensors["dw.weight"] = torch.randn(32, 1, 7, 7, generator=generator)
    save_state_dict(tensors, path, metadata=metadata)
    return path


class Document(HTMLParser):
    """What the tests read from an HTML file: section ids, external references, scripts and text per section."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[str]] = {}
        self.external: list[str] = []
        self.scripts: list[str] = []
        self._section: str | None = None
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.external += [v for k, v in attrs if k in ("src", "href") and v and v.startswith(("http:", "https:"))]
        if tag == "section":
            self._section = values["id"]
            self.sections[self._section] = []
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False if tag == "script" else self._in_script
        if tag == "section":
            self._section = None

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
        elif self._section:
            self.sections[self._section].append(data)

    def text(self, section: str) -> str:
        return " ".join(self.sections[section])


def parse(path: Path) -> Document:
    document = Document()
    document.feed(path.read_text(encoding="utf-8"))
    document.close()
    return document


@pytest.mark.slow
def test_report_html_is_one_offline_file_with_every_section_and_the_numbers_of_the_json(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path / "depthwise_net.safetensors", 1.0, depthwise=True)
    arguments = ["report", "--model", f"weights:{checkpoint}", *FAST]
    assert main([*arguments, "--html", str(tmp_path / "first.html"), "--json", str(tmp_path / "report.json")]) == 0
    assert main([*arguments, "--html", str(tmp_path / "report.html")]) == 0  # a second, independent run
    data = json.loads((tmp_path / "report.json").read_text())
    document = parse(tmp_path / "report.html")

    assert list(document.sections) == list(SECTIONS)
    digest = data["models"][0]["sha256"]  # shortened in its cell, whole on hover (its title)
    assert "depthwise_net.safetensors" in document.text("loaded") and f"{digest[:12]}…" in document.text("loaded")
    assert f'title="{digest}"' in (tmp_path / "report.html").read_text(encoding="utf-8")
    assert document.external == []
    plotly = get_plotlyjs()
    assert sum(plotly[:200] in script for script in document.scripts) == 1
    assert (tmp_path / "report.html").read_text().count(plotly[:200]) == 1
    assert "cdn.plot.ly" not in "".join(s for s in document.scripts if plotly[:200] not in s)

    assert set(data["skipped"]) == {"accuracy", "trajectory"}  # weights-only, one checkpoint
    model = data["energy"]["models"][0]
    energy = document.text("energy")
    for value in (model["theory"]["eta_t"], model["theory"]["r"], model["random_init"]["mean"]):
        assert number(value) in energy
    whitening = document.text("whitening")
    assert number(data["whitening"]["curves"]["rgb"][10]) in whitening
    keys = document.text("masterkeys")
    assert data["masterkeys"]["n_filters"] == 32 and sum(data["masterkeys"]["published_assignment"]["counts"]) == 32
    assert all(number(sigma["sigma_x"]) in keys for sigma in data["scalespace"]["filters"])
    layers = {row["layer"]: row for row in data["layers"]}
    assert layers["stem"]["kind"] == "first" and "energy" in layers["stem"]["analysed"]
    assert "master keys" in layers["dw"]["analysed"] and "first layer" in layers["body"]["skipped"]
    assert [row["layer"] for row in data["weights"]["layers"]] == list(layers) and set(layers) == {"stem", "body", "dw"}
    assert "weights-only" in document.text("accuracy") and "One checkpoint" in document.text("trajectory")
    embedded = json.loads(document.scripts[-1])  # the file carries its own numbers: the same as the first run's
    assert all(embedded[key] == data[key] for key in ("models", "layers", "energy", "whitening", "weights"))


@pytest.mark.slow
def test_a_folder_of_three_checkpoints_is_a_trajectory_in_natural_order(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for name, scale in (("ckpt_2", 0.2), ("ckpt_10", 1.0), ("ckpt_1", 0.1)):
        write_checkpoint(folder / f"{name}.safetensors", scale)
    assert sorted(["ckpt_2", "ckpt_10", "ckpt_1"], key=natural_key) == ["ckpt_1", "ckpt_2", "ckpt_10"]
    html, out = tmp_path / "run.html", tmp_path / "run.json"
    assert main(["report", "--model", f"weights:{folder}", *FAST, "--html", str(html), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    trajectory = data["trajectory"]
    assert [label.split(".")[0] for label in trajectory["labels"]] == ["ckpt_1", "ckpt_2", "ckpt_10"]
    assert data["final"].endswith("ckpt_10.safetensors")
    # the profiles move away from the first checkpoint's as the planted direction grows
    assert trajectory["vs_first"][0] == pytest.approx(1.0) and trajectory["vs_first"][2] < trajectory["vs_first"][1]
    assert len(trajectory["whitening"]) == 3 and "trajectory" not in data["skipped"]
    text = parse(html).text("trajectory")
    assert all(number(value) in text for value in trajectory["eta_t"])


def test_recorded_epochs_order_a_folder_and_a_training_lab_run_is_its_snapshots(tmp_path: Path) -> None:
    for name, epoch in (("a", 3), ("b", 1), ("c", 2)):
        write_checkpoint(tmp_path / f"{name}.safetensors", epoch / 10, metadata={"epoch": str(epoch)})
    assert [Path(m.spec).stem for m in load_series([f"weights:{tmp_path}"])] == ["b", "c", "a"]
    torch_files = tmp_path / "torch"
    torch_files.mkdir()
    for name, epoch in (("x", 20), ("y", 5), ("z", 10)):  # training scripts save {"epoch": ..., "state_dict": ...}
        weights = {"stem.weight": torch.full((4, 3, 3, 3), float(epoch))}
        torch.save({"epoch": epoch, "state_dict": weights, "best_acc": 0.5}, torch_files / f"{name}.pt")
    assert [Path(m.spec).stem for m in load_series([f"weights:{torch_files}"])] == ["y", "z", "x"]
    folder = SHIPPED_RUNS_DIR / "lab_vgg_true_s0"
    snapshots = load_series([f"weights:{folder}"])
    run = load_run(folder)
    assert [m.label for m in snapshots] == [f"{run.name} step {s}" for s in run.steps]
    assert all(m.weights_only and m.input_config == run.input_config for m in snapshots)
    final = snapshots[-1].state_dict[f"{run.first_layer}.weight"].numpy()
    assert np.array_equal(final, run.final_weights)


@pytest.mark.slow
def test_a_runnable_model_on_labelled_images_gets_accuracy_and_channel_axes(tmp_path: Path) -> None:
    loaded = load_model("demo:tiny_vgg")
    photos = bundled_images()
    rng = np.random.default_rng(0)
    for index in range(4):  # 4 of the demo's classes, 10 crops of its photo each
        name = photos.names[index]
        image = photos.image(index)
        (tmp_path / name).mkdir()
        for j in range(10):
            side = min(image.size) // 2
            left, top = rng.integers(0, image.size[0] - side), rng.integers(0, image.size[1] - side)
            image.crop((left, top, left + side, top + side)).save(tmp_path / name / f"{j}.png")
    settings = ReportSettings(images=str(tmp_path), seeds=2, max_distance=10, n_calibration=16, n_evaluation=16)
    report = build_report([loaded], settings=settings)
    assert "accuracy" not in report.skipped and "channels" not in report.skipped, report.skipped
    assert report.accuracy.n_images == 40 and report.accuracy.top1 > 1 / 11  # above chance on its own photos
    assert report.channels.layer == "features.14"  # the last non-depthwise conv with at most 256 channels
    row = {r["layer"]: r for r in report.layers}["features.14"]
    assert "channel axes" in row["analysed"]
    assert json.loads(json.dumps(report.to_dict()))["channels"]["spearman"] == report.channels.axes.spearman
    (tmp_path / "report.html").write_text(report_html(report), encoding="utf-8")
    text = parse(tmp_path / "report.html").text("accuracy")
    assert number(report.accuracy.top1) in text and "features.14" in text and "Skipped" not in text
    assert "task information is at the noise floor for" in text and "on 16 images" in text
    assert "The axes are weakly aligned after training" in text and "cannot be tested offline" in text  # the claims


@pytest.mark.slow
def test_an_onnx_model_is_reported_from_its_weights(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 7, groups=8, padding=3),
                              torch.nn.Conv2d(8, 4, 1))
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(net, torch.zeros(1, 3, 32, 32), str(path), dynamo=False)
    out = tmp_path / "onnx.json"
    assert main(["report", "--model", f"onnx:{path}", *FAST, "--k", "4", "--html", str(tmp_path / "onnx.html"),
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["models"][0]["weights_only"] and "masterkeys" not in data["skipped"] and "energy" not in data["skipped"]
    assert sorted(row["kind"] for row in data["layers"]) == ["depthwise", "first", "pointwise"]
    assert data["masterkeys"]["n_filters"] == 8


def test_the_cache_stamp_of_a_folder_changes_when_a_checkpoint_is_added(tmp_path: Path) -> None:
    from fl_core.report.series import series_stamp

    write_checkpoint(tmp_path / "ckpt_1.safetensors", 0.1)
    before = series_stamp(f"weights:{tmp_path}")
    write_checkpoint(tmp_path / "ckpt_2.safetensors", 0.2)
    assert series_stamp(f"weights:{tmp_path}") != before and "ckpt_2" in series_stamp(f"weights:{tmp_path}")
    assert series_stamp("demo:tiny_vgg") == ""  # demo files are shipped with the app


@pytest.mark.slow
def test_the_real_mobilenet_on_the_imagenet_sample_gets_every_section_but_the_trajectory(mobilenet,
                                                                                        imagenet_sample) -> None:
    settings = ReportSettings(images=str(imagenet_sample), max_images=6, seeds=2, max_eval_images=24,
                              n_calibration=16, n_evaluation=16)
    report = build_report([mobilenet], settings=settings)
    assert set(report.skipped) == {"trajectory"}, report.skipped
    assert report.accuracy.n_images == 24 and report.accuracy.top1 >= 0.5  # a trained ImageNet model
    assert report.masterkeys.n_filters == 7136 and report.masterkeys.kernel_size == 3  # 17 depthwise 3×3 layers
    assert report.weights.totals["non_finite"] == 0 and len(report.weights.layers) == len(mobilenet.conv_layers)
    analysed = [row["layer"] for row in report.layers if "master keys" in row["analysed"]]
    assert len(analysed) == 17
