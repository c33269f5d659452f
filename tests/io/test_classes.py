"""ImageNet-1k class names and the mapping of an ImageFolder tree's folders onto a model's outputs."""

from __future__ import annotations

import csv

from fl_core.io.classes import class_key, imagenet_class_names, imagenet_wnids, map_tree_classes


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


def test_folders_map_by_name_ignoring_case_spaces_underscores_and_hyphens():
    names = imagenet_class_names()
    mapping = map_tree_classes(["great_white_shark", "Tiger-Shark", "TENCH", "goldfish"], 1000)
    assert list(mapping.label_map) == [2, 3, 0, 1] and not mapping.warnings and not mapping.unmatched
    assert "All 4 classes" in mapping.how and "ignoring case" in mapping.how
    assert class_key("Great_White-  shark") == "great white shark" == class_key(names[2])
    # "Cardigan" (the corgi) and "cardigan" (the sweater) share a key: each maps by its exact name only
    exact = map_tree_classes(["Cardigan", "cardigan", "CARDIGAN"], 1000)
    assert list(exact.label_map) == [names.index("Cardigan"), names.index("cardigan"), -1]
    assert exact.unmatched == ("CARDIGAN",) and "'CARDIGAN' names more than one class" in exact.warnings[0]


def test_every_labels_csv_name_of_the_imagenet_sample_maps_to_its_class(imagenet_sample):
    rows = list(csv.DictReader((imagenet_sample / "labels.csv").open(encoding="utf-8")))
    unique = [row for row in rows if sum(r["name"] == row["name"] for r in rows) == 1]
    mapping = map_tree_classes([row["name"] for row in unique], 1000)
    assert len(unique) >= 990 and [int(row["index"]) for row in unique] == list(mapping.label_map)


def test_numbered_folders_map_by_index_and_a_partial_tree_names_what_it_leaves_out():
    assert list(map_tree_classes(["0", "5", "999"], 1000).label_map) == [0, 5, 999]
    partial = map_tree_classes(["car", "cat", "goldfish", "tench", "dog"], 1000, labels=[0, 0, 1, 2, 3, 3, 4])
    assert list(partial.label_map) == [-1, -1, 1, 0, -1] and partial.unmatched == ("car", "cat", "dog")
    assert "2 of 5 classes are mapped" in partial.how
    assert partial.warnings[0].startswith("4 of 7 images, in 3 of 5 folders ('car', 'cat', 'dog')")


def test_a_tree_that_maps_to_nothing_says_why_and_how_to_name_its_folders():
    nothing = map_tree_classes(["dog", "cat", "car"], 1000)
    assert nothing.label_map is None and nothing.unmatched == ("dog", "cat", "car")
    why = nothing.warnings[0]
    assert "no folder name ('dog', 'cat', 'car') is an ImageNet-1k wnid" in why
    assert "n01440764" in why and "'great_white_shark'" in why and "0 to 999" in why
    cifar = map_tree_classes(["dog", "cat", "car"], 10, ("airplane", "automobile", "bird"))
    assert "'airplane', 'bird'" in cifar.warnings[0] and "wnid (e.g." not in cifar.warnings[0]
