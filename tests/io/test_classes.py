"""ImageNet-1k class names and the mapping of an ImageFolder tree's folders onto a model's outputs."""

from __future__ import annotations

from fl_core.io.classes import imagenet_class_names, imagenet_wnids, map_tree_classes


def test_class_mapping_rules():
    wnids = imagenet_wnids()
    assert len(wnids) == 1000 and list(wnids) == sorted(wnids)
    subset = map_tree_classes([wnids[3], wnids[997]], 1000)
    assert list(subset.label_map) == [3, 997] and "2 of the 1000" in subset.how and not subset.warnings
    by_name = map_tree_classes(["cat", "dog"], 3, ("dog", "bird", "cat"))
    assert list(by_name.label_map) == [2, 0]
    by_position = map_tree_classes(["x", "y"], 2)
    assert list(by_position.label_map) == [0, 1] and by_position.warnings
    mismatch = map_tree_classes(["x", "y", "z"], 1000)
    assert mismatch.label_map is None and "3 classes but the model has 1000 outputs" in mismatch.warnings[0]
    assert map_tree_classes([], 1000).label_map is None


def test_imagenet_names_are_in_class_index_order():
    names = imagenet_class_names()
    assert len(names) == 1000 and names[0] == "tench" and names[1] == "goldfish"
