"""CIFAR-10/100 in torchvision's format as image sources (``cifar10:PATH``, ``cifar100:PATH``): read as torchvision
reads them, through every door that takes an image source, and never by running a pickle's code."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import torchvision.datasets.cifar
from torchvision.transforms import v2 as T

import fl_core
from fl_core.arguments import as_images
from fl_core.channelaxes.calibration import channel_data
from fl_core.cli import main as cli_main
from fl_core.errors import DataError
from fl_core.io import cifar_data
from fl_core.io.cifar import CIFAR10_CLASSES
from fl_core.io.classes import map_tree_classes
from fl_core.io.images import ModelScaleResize, decode_rgb, folder_images, iter_input_batches, open_images
from fl_core.io.models import load_model
from fl_core.io.sources import CifarSource, source_path
from tests.cifar_files import cifar_rows, py2_pickle, write_cifar
from tests.conftest import CHECKPOINTS, REPO, require_fixture
from tests.io.conftest import CIFAR_LIKE_WNIDS

CIFAR100_CLASSES = [f"class_{i:02d}" for i in range(100)]
RESNET20_FILE = CHECKPOINTS / "resnet20_cifar10.th"


def random_images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)


@pytest.fixture
def cifar10(tmp_path: Path) -> tuple[Path, np.ndarray, list[int], np.ndarray, list[int]]:
    """torchvision's download folder of a small CIFAR-10: 12 test images, 15 training images over 5 batches."""
    test, train = random_images(12), random_images(15, seed=1)
    test_labels, train_labels = [(3 * i) % 10 for i in range(12)], [i % 10 for i in range(15)]
    write_cifar(tmp_path / "data", "cifar10", list(CIFAR10_CLASSES), (test, test_labels), (train, train_labels))
    return tmp_path / "data", test, test_labels, train, train_labels


def torchvision_reads(root: Path, kind: str, train: bool, monkeypatch: pytest.MonkeyPatch):
    """torchvision's own reader of the same folder (its checksums of the published files switched off)."""
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args: True)
    dataset = torchvision.datasets.CIFAR10 if kind == "cifar10" else torchvision.datasets.CIFAR100
    return dataset(str(root), train=train)


def pixels(images) -> np.ndarray:
    return np.stack([np.asarray(images.image(i)) for i in range(len(images))])


# ------------------------------------------------------------------------------------------------------- the format


def test_the_source_names_a_kind_a_path_and_a_split() -> None:
    assert CifarSource.parse("cifar10:/data") == CifarSource("cifar10", "/data")
    assert CifarSource.parse("cifar100:/data/x@train") == CifarSource("cifar100", "/data/x", "train")
    assert CifarSource.parse("cifar10:/data/me@home") == CifarSource("cifar10", "/data/me@home")
    assert CifarSource.parse("/data/cifar10") is None and CifarSource.parse("bundled") is None
    assert [source_path(s) for s in ("bundled", "", "/data/val", "cifar10:/data@test")] == [None, None, "/data/val",
                                                                                            "/data"]


@pytest.mark.parametrize("split", ["test", "train"])
def test_a_cifar10_split_reads_as_torchvision_reads_it(cifar10, split: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root, test, test_labels, train, train_labels = cifar10
    reference = torchvision_reads(root, "cifar10", split == "train", monkeypatch)
    expected, labels = (train, train_labels) if split == "train" else (test, test_labels)
    assert np.array_equal(reference.data, expected) and reference.targets == labels  # the file is torchvision's format
    for source in (f"cifar10:{root}", f"cifar10:{root / 'cifar-10-batches-py'}"):
        images = fl_core.open_images(source + ("@train" if split == "train" else ""))
        assert np.array_equal(pixels(images), reference.data) and images.labels == reference.targets
        assert images.classes == tuple(reference.classes) == CIFAR10_CLASSES and images.labelled
        assert images.description.startswith(f"{len(labels)} images of the CIFAR-10 {split} split in ")
    assert fl_core.open_images(f"cifar10:{root}@test").labels == test_labels  # the default split, named


def test_one_batch_file_is_its_own_split_and_a_limit_spreads_over_the_split(cifar10) -> None:
    root, _, _, train, train_labels = cifar10
    batch = root / "cifar-10-batches-py" / "data_batch_2"
    images = open_images(f"cifar10:{batch}")
    assert images.names == ["data_batch_2[0]", "data_batch_2[1]", "data_batch_2[2]"]
    assert np.array_equal(pixels(images), train[3:6]) and images.labels == train_labels[3:6]
    with pytest.raises(DataError, match="is its own split: leave out @train"):
        open_images(f"cifar10:{batch}@train")
    spread = open_images(f"cifar10:{root}@train", limit=5)
    assert spread.description.startswith("5 of 15 images of the CIFAR-10 train split")
    assert spread.names == ["data_batch_1[0]", "data_batch_2[1]", "data_batch_3[1]", "data_batch_4[1]",
                            "data_batch_5[2]"]  # evenly spaced over the 15: rows 0, 4, 7, 10, 14
    assert np.array_equal(pixels(spread), train[[0, 4, 7, 10, 14]])


def test_cifar100_reads_its_fine_labels_and_class_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images, labels = random_images(10), [7 * i for i in range(10)]
    write_cifar(tmp_path, "cifar100", CIFAR100_CLASSES, (images, labels))
    reference = torchvision_reads(tmp_path, "cifar100", False, monkeypatch)
    read = open_images(f"cifar100:{tmp_path}")
    assert np.array_equal(pixels(read), reference.data) and read.labels == reference.targets == labels
    assert read.classes == tuple(reference.classes) == tuple(CIFAR100_CLASSES)
    with pytest.raises(DataError, match=r"holds cifar100's files: use cifar100:PATH"):
        open_images(f"cifar10:{tmp_path}")


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_files_pickled_by_python_3_read_too(tmp_path: Path, protocol: int) -> None:
    """A copy re-pickled by Python 3 (protocol 2's ``_codecs.encode``, protocol 5's ``_frombuffer``) or with bytes
    keys reads the same."""
    images, labels = random_images(4), [1, 2, 3, 4]
    folder = write_cifar(tmp_path, "cifar10", list(CIFAR10_CLASSES), (images, labels))
    batch = {b"data": cifar_rows(images), b"labels": labels, b"batch_label": b"testing batch 1 of 1"}
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=protocol))
    read = open_images(f"cifar10:{tmp_path}")
    assert np.array_equal(pixels(read), images) and read.labels == labels


# ------------------------------------------------------------------------------------------- hostile and broken files


class Payload:
    """A pickle that runs ``function(*args)`` when loaded by :func:`pickle.load`."""

    def __init__(self, function, *args) -> None:
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def hostile_files(marker: Path) -> dict[str, tuple[str, bytes]]:
    """Pickles that run code when :func:`pickle.load` reads them (each creates ``marker``), by the file they
    replace."""
    shell, python = f"touch {marker}", f"open({str(marker)!r}, 'w').close()"
    return {
        "os.system as the data": ("test_batch", pickle.dumps({"data": Payload(os.system, shell), "labels": []})),
        "os.system as the meta file": ("batches.meta", pickle.dumps(Payload(os.system, shell), protocol=2)),
        "eval": ("test_batch", pickle.dumps(Payload(eval, python))),
        "subprocess": ("test_batch", pickle.dumps({"labels": Payload(subprocess.call, ["touch", str(marker)])})),
        "exec, Python 2 style": ("test_batch", b"\x80\x02c__builtin__\nexec\n(U" + bytes([len(python)])
                                 + python.encode() + b"tR."),
    }


@pytest.mark.parametrize("case", ["os.system as the data", "os.system as the meta file", "eval", "subprocess",
                                  "exec, Python 2 style"])
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(cifar10, tmp_path: Path, case: str) -> None:
    root = cifar10[0]
    marker = tmp_path / "ran"
    name, payload = hostile_files(marker)[case]
    (root / "cifar-10-batches-py" / name).write_bytes(payload)
    for door in (open_images, as_images, lambda source: channel_data("cifar:resnet20", source, 8, 8)):
        with pytest.raises(DataError, match=r"is not a CIFAR file in torchvision's format \(it names .*which no CIFAR "
                                            r"file holds\): refused without running anything"):
            door(f"cifar10:{root}")
    assert not marker.exists()
    pickle.loads(payload, encoding="latin1")  # our own payload, to show that it is live: plain pickle runs it
    assert marker.exists()


class ForgedArray:
    """An array whose pickle asks numpy for 10¹² values: ``_reconstruct(ndarray, (10**12,), b'b')`` allocates them
    when :func:`pickle.load` reads it."""

    def __reduce__(self):
        return (np._core.multiarray._reconstruct, (np.ndarray, (10**12,), b"b"),
                (1, (10**12 // 3072, 3072), np.dtype(np.uint8), False, bytes(3072)))


def test_pickled_arrays_are_checked_before_any_memory_is_taken(cifar10) -> None:
    """numpy's own constructors are never called: an array of 10¹² values, an object array, a call of numpy.ndarray
    and a codec other than latin1 are refused at once."""
    root = cifar10[0]
    cases = {
        "10^12 values": pickle.dumps({"data": ForgedArray(), "labels": [0]}, protocol=2),
        "an object array": pickle.dumps({"data": np.array([None, 1], dtype=object), "labels": [0, 1]}, protocol=2),
        "numpy.ndarray called": b"\x80\x02cnumpy\nndarray\n(J\x00\x00\x00\x40tR.",
        "another codec": b"\x80\x02c_codecs\nencode\n(X\x01\x00\x00\x00xX\x04\x00\x00\x00zlibtR.",
    }
    for data in cases.values():
        (root / "cifar-10-batches-py" / "test_batch").write_bytes(data)
        with pytest.raises(DataError, match="torchvision's format"):
            open_images(f"cifar10:{root}")


def test_files_that_are_not_cifar_are_refused_with_what_to_do(cifar10, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root = cifar10[0]
    folder = root / "cifar-10-batches-py"
    with pytest.raises(DataError, match=r"is not CIFAR-10 in torchvision's format: batches.meta, test_batch missing"):
        open_images(f"cifar10:{tmp_path / 'empty'}")
    (folder / "test_batch").write_bytes(py2_pickle({"data": cifar_rows(random_images(2)), "labels": [0, 10]}))
    with pytest.raises(DataError, match=r"'labels' is not 2 class indices from 0 to 9"):
        open_images(f"cifar10:{root}")
    (folder / "test_batch").write_bytes(py2_pickle({"data": np.zeros((2, 1024), np.uint8), "labels": [0, 1]}))
    with pytest.raises(DataError, match=r"'data' is not a uint8 array of 3,072-value rows"):
        open_images(f"cifar10:{root}")
    (folder / "test_batch").write_bytes(b"\x89PNG\r\n not a pickle")
    with pytest.raises(DataError, match=r"is not a CIFAR file in torchvision's format"):
        open_images(f"cifar10:{root}")
    (folder / "test_batch").write_bytes(py2_pickle({"data": cifar_rows(random_images(2)), "labels": [0, 1]}))
    monkeypatch.setattr(cifar_data, "MAX_FILE_BYTES", (folder / "batches.meta").stat().st_size)
    with pytest.raises(DataError, match=r"test_batch is 6,[0-9]{3} bytes, over the [0-9]+ of the largest CIFAR file"):
        open_images(f"cifar10:{root}")
    with pytest.raises(DataError, match="cannot be used: it is empty"):
        open_images("cifar10:")


def test_a_shared_cifar_folder_whose_file_links_out_is_refused(cifar10, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The path policy holds for every file read: a batch that is a symlink out of the server's data root is
    refused with the policy's message (the door of the folder itself is in tests/test_path_policy.py)."""
    root = cifar10[0]
    outside = tmp_path / "private_batch"
    (root / "cifar-10-batches-py" / "test_batch").rename(outside)
    (root / "cifar-10-batches-py" / "test_batch").symlink_to(outside)
    monkeypatch.setenv("FL_DATA_ROOTS", str(root))
    with pytest.raises(DataError, match="outside the folders this server shares"):
        open_images(f"cifar10:{root}")
    monkeypatch.setenv("FL_DATA_ROOTS", str(tmp_path))
    assert len(open_images(f"cifar10:{root}")) == 12


# ----------------------------------------------------------------------------------------- a real network, every door


@pytest.fixture(scope="module")
def cifar_like_file(imagenet_sample: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CIFAR-10's test split in torchvision's format made of the ImageNet sample's 42 photos of CIFAR-10 classes,
    each as the CIFAR ResNet sees it (short side resized to 32 pixels, centre crop), labelled by its class."""
    config = load_model("cifar:resnet20").input_config
    to_32 = T.Compose([ModelScaleResize(config), T.CenterCrop(32)])
    images, labels = [], []
    for label, wnids in enumerate(CIFAR_LIKE_WNIDS.values()):
        for photo in sorted(p for wnid in wnids for p in (imagenet_sample / wnid).iterdir()):
            images.append(np.asarray(to_32(decode_rgb(photo))))
            labels.append(label)
    root = tmp_path_factory.mktemp("cifar_like_file")
    write_cifar(root, "cifar10", list(CIFAR10_CLASSES), (np.stack(images), labels))
    return root


def model_inputs(images, loaded) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(iter_input_batches(images, loaded.input_config))
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


@pytest.mark.slow
def test_a_real_cifar_resnet_scores_its_own_kind_of_data_above_chance(cifar_like_file: Path,
                                                                      cifar_like_tree: Path) -> None:
    """The CIFAR file gives the network exactly the input the same photos give from a folder, and the real ResNet-20
    classifies it far above chance, its classes mapped by the meta file's names."""
    loaded = load_model(f"cifar:resnet20={require_fixture(RESNET20_FILE)}")
    images = fl_core.open_images(f"cifar10:{cifar_like_file}")
    mapping = map_tree_classes(images.classes, loaded.num_classes, loaded.class_names)
    assert "by name" in mapping.how and not mapping.warnings
    x, y = model_inputs(images, loaded)
    folder_x, folder_y = model_inputs(folder_images(cifar_like_tree), loaded)
    assert x.shape == (42, 3, 32, 32) and torch.equal(x, folder_x) and torch.equal(y, folder_y)
    with torch.no_grad():
        correct = int((loaded.model(x).argmax(1) == torch.as_tensor(mapping.label_map)[y]).sum())
    assert correct / len(images) > 0.6  # measured 33 of 42 (0.79), as from the folder; chance 0.1


@pytest.mark.slow
def test_the_command_line_analyses_a_cifar_folder(cifar_like_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "axes.json"
    assert cli_main(["channels", "--model", f"cifar:resnet20={require_fixture(RESNET20_FILE)}", "--layer",
                     "layer3.2.conv1", "--data", f"cifar10:{cifar_like_file}", "--calibration", "16", "--evaluation",
                     "16", "--criteria", "--json", str(out), "--quiet"]) == 0
    result = json.loads(out.read_text())
    assert result["data"] == f"16 + 16 images of 42 images of the CIFAR-10 test split in {cifar_like_file}"
    assert result["calibration_accuracy"] > 0.3 and len(result["channels"]) == 64  # chance 0.1
    assert not any("top-1 class" in warning for warning in result["warnings"])  # true labels, not decisions


@pytest.mark.slow
def test_the_energy_command_reads_a_cifar_folder_in_a_fresh_process(cifar10, tmp_path: Path) -> None:
    root = cifar10[0]
    out = tmp_path / "energy.json"
    subprocess.run([sys.executable, "-m", "fl_core", "energy", "--model", "cifar:resnet20", "--images",
                    f"cifar10:{root}@train", "--max-images", "10", "--seeds", "1", "--json", str(out), "--quiet"],
                   cwd=REPO, check=True, timeout=600, capture_output=True)
    assert json.loads(out.read_text())["images"] == f"10 of 15 images of the CIFAR-10 train split in {root}"
