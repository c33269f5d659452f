"""Filter swaps: the affine replacement rule, baselines and controls, chosen layers, and the cached model untouched."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fl_core.errors import ModelSpecError
from fl_core.io.images import bundled_images
from fl_core.io.models import LoadedModel, load_model
from fl_core.io.specs import ModelSpec
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.fitting import idealized_templates
from fl_core.masterkeys.rescore import rescore
from fl_core.masterkeys.scalespace import affine_fit_to_templates
from fl_core.masterkeys.swap import REPLACEMENTS, swap_filters, swapped_model

from .test_clustering import orthogonal_prototypes, planted_filters, tiny_loaded


def snapshot(loaded: LoadedModel) -> dict[str, torch.Tensor]:
    return {key: tensor.detach().clone() for key, tensor in loaded.model.state_dict().items()}


@pytest.mark.slow
def test_swaps_never_touch_the_cached_model(mobilenet):
    before = snapshot(mobilenet)
    pointers = {key: t.data_ptr() for key, t in mobilenet.model.state_dict().items()}
    bank = depthwise_bank(mobilenet)
    swaps = [swap_filters(bank, name, stages=[4]) for name in ("B", "centroid", "random")]
    copy = swapped_model(mobilenet, swaps[0])
    small = dataclasses.replace(mobilenet, input_config=mobilenet.input_config.with_overrides(input_size=64))
    rescore(small, bundled_images(["chelsea", "coffee"]), swaps=swaps, batch_size=2)
    for key, tensor in mobilenet.model.state_dict().items():
        assert torch.equal(tensor, before[key]), key
        assert tensor.data_ptr() == pointers[key], key
        assert mobilenet.state_dict[key].data_ptr() == pointers[key], key
    changed = [k for k, t in copy.state_dict().items() if not torch.equal(t, before[k])]
    assert changed == [f"{layer.layer}.weight" for layer in swaps[0].layers]


def test_idealized_swap_is_the_authors_affine_rule():
    loaded = tiny_loaded(seed=3)
    bank = depthwise_bank(loaded)
    swap = swap_filters(bank, "D2")
    for layer in bank.layers:
        original = loaded.model.get_parameter(layer.weight_key).detach().double().numpy().reshape(-1, *[
            layer.kernel_size] * 2)
        templates = idealized_templates("D2", layer.kernel_size)
        expected = affine_fit_to_templates(original, templates).replaced(templates)
        np.testing.assert_allclose(swap.weights[layer.weight_key].numpy(), expected, rtol=1e-5, atol=1e-6)
        error = np.linalg.norm(original - expected) / np.linalg.norm(original)
        row = next(r for r in swap.layers if r.layer == layer.name)
        assert row.relative_error == pytest.approx(error, rel=1e-5)
        # the replacement keeps each filter's mean (b = mean y) and its projection on the template (a = <y, x_k>)
        np.testing.assert_allclose(expected.mean(axis=(1, 2)), original.mean(axis=(1, 2)), atol=1e-12)
    assert swap.to_dict()["layers"][0]["layer"] == "dw7" and "weights" not in swap.to_dict()


def test_keep_is_an_exact_control_and_random_keeps_each_norm():
    loaded = tiny_loaded(seed=4)
    bank = depthwise_bank(loaded)
    keep = swap_filters(bank, "keep")
    assert keep.relative_error == 0 and all(row.mean_abs_cosine == pytest.approx(1.0) for row in keep.layers)
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(swapped_model(loaded, keep)(x), loaded.model(x))
    random = swap_filters(bank, "random", seed=1)
    for key, filters in random.weights.items():
        np.testing.assert_allclose(filters.flatten(1).norm(dim=1), bank.weights[key].flatten(1).norm(dim=1),
                                   rtol=1e-5)
    # a random direction of the same length: E‖y - r‖² = 2‖y‖², so the error is about √2
    assert 1.2 < random.relative_error < 1.6
    assert not torch.equal(random.weights["dw7.weight"], swap_filters(bank, "random", seed=2).weights["dw7.weight"])


def test_centroid_swap_rebuilds_planted_clusters_exactly():
    filters, _ = planted_filters(4, orthogonal_prototypes(4), noise=0.0)
    loaded = tiny_loaded(filters)
    swap = swap_filters(depthwise_bank(loaded), "centroid", layers=["dw7"], k=4, seed=0)
    assert [row.layer for row in swap.layers] == ["dw7"] and swap.k == 4
    assert swap.relative_error < 1e-5 and swap.layers[0].mean_abs_cosine == pytest.approx(1.0, abs=1e-6)


def test_chosen_stages_only_change_those_layers():
    loaded = tiny_loaded(seed=5)
    bank = depthwise_bank(loaded)
    swap = swap_filters(bank, "B", stages=[1])
    assert list(swap.weights) == ["dw3.weight"]
    model = swapped_model(loaded, swap)
    assert torch.equal(model.dw7.weight, loaded.model.dw7.weight)
    assert not torch.equal(model.dw3.weight, loaded.model.dw3.weight)
    with pytest.raises(ValueError, match="Unknown replacement"):
        swap_filters(bank, "E")
    assert set(REPLACEMENTS) == {"A", "B", "C1", "C2", "D1", "D2", "centroid", "random", "keep", "zero"}


@pytest.mark.slow
def test_weights_only_files_cannot_be_swapped_into_a_network(mobilenet):
    weights_only = load_model(f"weights:{ModelSpec.parse(mobilenet.spec).path}")
    swap = swap_filters(depthwise_bank(weights_only), "B", stages=[0])
    assert swap.layers[0].relative_error > 0  # the filters can still be swapped and measured ...
    with pytest.raises(ModelSpecError, match="weights-only"):  # ... but there is no network to run
        swapped_model(weights_only, swap)
