"""Layer inventory: kinds, the first convolution across families, weights-only files, hooks."""

from __future__ import annotations

import pytest
import torch

from fl_core.errors import AnalysisError
from fl_core.io.layers import conv_inventory, conv_kind, find_layer, first_conv_name, iter_layer_inputs
from fl_core.io.models import load_model


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "first"), [
    ("timm:resnet18", "conv1"),
    ("timm:convnext_atto", "stem.0"),
    ("timm:mobilenetv3_small_050", "conv_stem"),
    ("torchvision:squeezenet1_0", "features.0"),
    ("torchvision:mobilenet_v2", "features.0.0"),
])
def test_first_convolution_is_found_for_timm_and_torchvision_families(spec: str, first: str) -> None:
    loaded = load_model(spec)
    assert first_conv_name(loaded) == first
    layers = conv_inventory(loaded)
    assert layers[0].name == first and layers[0].kind == "first"
    assert sum(lay.kind == "first" for lay in layers) == 1


def test_kinds_on_a_depthwise_separable_network() -> None:
    layers = {lay.name: lay for lay in conv_inventory(load_model("torchvision:mobilenet_v2"))}
    assert layers["features.1.conv.0.0"].kind == "depthwise" and layers["features.1.conv.0.0"].groups == 32
    assert layers["features.1.conv.1"].kind == "pointwise"
    assert sum(lay.kind == "depthwise" for lay in layers.values()) == 17
    assert layers["features.0.0"].stride == (2, 2)


def test_conv_kind_rules() -> None:
    assert conv_kind(64, 1, 64, (7, 7)) == "depthwise"
    assert conv_kind(64, 32, 1, (1, 1)) == "pointwise"
    assert conv_kind(64, 16, 4, (3, 3)) == "grouped"
    assert conv_kind(64, 32, 1, (3, 3)) == "regular"


def test_weights_only_inventory_lists_4d_tensors(resnet20) -> None:
    layers = conv_inventory(resnet20)
    assert layers[0].name == "conv1" and layers[0].kind == "first" and layers[0].patch_dim == 27
    assert len(layers) == 19  # 1 stem + 3 stages × 3 blocks × 2 convs


@pytest.mark.slow
def test_find_layer_lists_choices_on_a_typo() -> None:
    loaded = load_model("timm:resnet18")
    assert find_layer(loaded, None).name == "conv1"
    assert find_layer(loaded, "layer1.0.conv1.weight").name == "layer1.0.conv1"
    with pytest.raises(AnalysisError, match="conv1"):
        find_layer(loaded, "layer9")


@pytest.mark.slow
def test_layer_inputs_are_captured_and_the_forward_stops_there() -> None:
    loaded = load_model("timm:resnet18")
    x = torch.randn(2, 3, 64, 64)
    captured = list(iter_layer_inputs(loaded.model, "layer1.0.conv1", iter([x]), torch.device("cpu")))
    assert captured[0].shape == (2, 64, 16, 16)
    with torch.inference_mode():
        stem = loaded.model.maxpool(loaded.model.act1(loaded.model.bn1(loaded.model.conv1(x))))
    torch.testing.assert_close(captured[0], stem)
