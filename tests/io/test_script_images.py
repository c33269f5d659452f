"""Images a script holds as data: a tensor batch, a Dataset, a DataLoader — preprocessed exactly like the same
images saved as files, their labels scored where an analysis uses labels, normalized values refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

import fl_core
from fl_core import DataError
from fl_core.arguments import as_images
from fl_core.channelaxes.calibration import channel_data
from fl_core.io.datasets import DatasetImages
from fl_core.io.images import input_transform

TINY = "demo:tiny_vgg"


def batch(n: int = 6, size: int = 40, seed: int = 0) -> torch.Tensor:
    """RGB values in [0, 1] with 8-bit steps, as ToTensor() gives them."""
    return torch.randint(0, 256, (n, 3, size, size), generator=torch.Generator().manual_seed(seed)) / 255


def saved_as_files(x: torch.Tensor, folder: Path) -> Path:
    folder.mkdir()
    for i, image in enumerate(x):
        array = (image.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
        Image.fromarray(array).save(folder / f"{i:03d}.png")
    return folder


class Photos(Dataset):
    """A plain map-style dataset of PIL images, labelled or not, without ``targets``."""

    def __init__(self, x: torch.Tensor, labels: list[int] | None = None) -> None:
        self.x, self.labels = x, labels

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        image = Image.fromarray((self.x[i].permute(1, 2, 0) * 255).round().to(torch.uint8).numpy())
        return image if self.labels is None else (image, self.labels[i])


@pytest.mark.slow
def test_a_tensor_batch_is_analysed_like_the_same_images_saved_as_files(tmp_path: Path) -> None:
    x = batch()
    folder = saved_as_files(x, tmp_path / "photos")
    images = as_images(x)
    assert len(images) == 6 and not images.labelled and "6 40×40 images of a tensor batch" in images.description
    assert np.array_equal(np.asarray(images.image(2)), np.asarray(Image.open(folder / "002.png")))
    from_tensor = fl_core.analyze_energy(TINY, x, seeds=2)
    from_files = fl_core.analyze_energy(TINY, str(folder), seeds=2)
    np.testing.assert_allclose(from_tensor.models[0].profile, from_files.models[0].profile, rtol=1e-12)
    assert as_images(batch(seed=1)).description != images.description  # another batch, another digest
    uint8 = as_images((x * 255).round().to(torch.uint8))
    assert np.array_equal(np.asarray(uint8.image(2)), np.asarray(images.image(2)))


@pytest.mark.slow
def test_labels_of_a_tensor_dataset_are_scored_as_the_model_outputs_they_index() -> None:
    x, y = batch(8, 32), torch.tensor([0, 3, 3, 10, 1, 2, 5, 7])
    loaded = fl_core.load_model(TINY)
    result = fl_core.rescore(loaded, TensorDataset(x, y), swaps=[])
    transform = input_transform(loaded.input_config)
    with torch.inference_mode():
        inputs = torch.stack([transform(as_images(x).image(i)) for i in range(len(x))])
        predicted = loaded.copy_model().eval()(inputs).argmax(1)
    assert result.n_images == 8 and result.top1 == pytest.approx((predicted == y).float().mean().item())
    assert "All 11 classes are mapped to the model's outputs (11 by index)" in result.classes
    loader = DataLoader(TensorDataset(x, y), batch_size=3)
    assert fl_core.rescore(loaded, loader, swaps=[]).top1 == result.top1


def test_a_loader_and_a_dataset_give_the_images_and_labels_of_the_batch() -> None:
    x, y = batch(5), [4, 0, 2, 2, 1]
    from_loader = as_images(DataLoader(TensorDataset(x, torch.tensor(y)), batch_size=2))
    from_dataset = as_images(Photos(x, y))
    assert isinstance(from_dataset, DatasetImages) and from_dataset.labelled
    for images in (from_loader, from_dataset):
        assert images.labels == y and images.classes == ("0", "1", "2", "3", "4")
        assert np.array_equal(np.asarray(images[3][0]), np.asarray(as_images(x).image(3)))
    subset = from_dataset.subset([4, 1])
    assert subset.labels == [1, 0] and subset.names == ["item 4", "item 1"]
    unlabelled = as_images(Photos(x))
    assert not unlabelled.labelled and unlabelled.labels == [-1] * 5


def test_a_dataset_that_names_its_classes_is_mapped_by_name_for_channel_analyses() -> None:
    loaded = fl_core.load_model(TINY)
    names = loaded.class_names
    x = batch(12, 32)
    dataset = Photos(x, [i % 2 for i in range(12)])
    dataset.classes = [names[5], names[9]]  # the dataset's class 0 is the model's output 5
    data = channel_data(loaded, dataset, n_calibration=8, n_evaluation=8)
    assert set(data.calibration.labels.tolist() + data.evaluation.labels.tolist()) == {5, 9}
    with pytest.raises(DataError, match="not labelled"):
        channel_data(loaded, x)


def test_a_subset_reads_labels_and_classes_of_its_data_set_without_reading_images() -> None:
    x = batch(6)
    dataset = Photos(x, [0, 1, 0, 1, 0, 1])
    dataset.targets, dataset.classes = dataset.labels, ["cat", "dog"]
    images = as_images(Subset(Subset(dataset, [5, 4, 3, 2]), [0, 2]))
    dataset.labels = None  # from here on an item read would be an unlabelled image: labels must come from targets
    assert images.labels == [1, 1] and images.classes == ("cat", "dog") and images.names == ["item 5", "item 3"]
    assert np.array_equal(np.asarray(images.image(1)), np.asarray(as_images(x).image(3)))


def test_normalized_or_misshapen_data_is_refused_with_what_to_give() -> None:
    x = batch()
    normalized = (x - 0.45) / 0.225
    for data in (normalized, DataLoader(TensorDataset(normalized), batch_size=2)):
        with pytest.raises(DataError, match=r"before normalization"):
            as_images(data)
    with pytest.raises(DataError, match=r"before normalization"):
        as_images(TensorDataset(normalized))[0]
    with pytest.raises(DataError, match=r"\(N, 3, H, W\)"):
        as_images(x[0])
    with pytest.raises(DataError, match="int64 values"):
        as_images(torch.zeros(2, 3, 8, 8, dtype=torch.long))
    with pytest.raises(DataError, match="more elongated"):
        as_images(torch.zeros(1, 3, 4, 200))
    with pytest.raises(fl_core.ArgumentError, match="a Dataset or a DataLoader"):
        as_images([x])
