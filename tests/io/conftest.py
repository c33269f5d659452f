"""Fixtures of the io tests: the ImageNet sample's photos of CIFAR-10 classes."""

from __future__ import annotations

from pathlib import Path

import pytest

CIFAR_LIKE_WNIDS = {
    "airplane": ("n02690373", "n04552348"),
    "automobile": ("n02814533", "n03100240", "n03594945", "n04285008", "n02930766"),
    "bird": ("n01530575", "n01531178", "n01558993", "n01580077", "n01592084"),
    "cat": ("n02123045", "n02123159", "n02123394", "n02123597", "n02124075"),
    "deer": ("n02422699", "n02423022", "n02417914"),
    "dog": ("n02085620", "n02099601", "n02106662", "n02110958", "n02088364"),
    "frog": ("n01641577", "n01644373", "n01644900"),
    "horse": ("n02389026", "n03538406"),
    "ship": ("n03095699", "n03344393", "n03673027", "n03947888", "n04147183", "n02687172"),
    "truck": ("n03345487", "n03417042", "n03796401", "n03930630", "n04461696", "n04467665"),
}
"""ImageNet classes that are CIFAR-10 classes (airliner → airplane, tabby → cat, ...): 42 photos of the sample."""


@pytest.fixture(scope="session")
def cifar_like_tree(imagenet_sample: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder tree of CIFAR-10 class names holding the sample's photos of those classes (links)."""
    tree = tmp_path_factory.mktemp("cifar_like")
    for name, wnids in CIFAR_LIKE_WNIDS.items():
        (tree / name).mkdir()
        for wnid in wnids:
            for photo in (imagenet_sample / wnid).iterdir():
                (tree / name / photo.name).symlink_to(photo)
    return tree
