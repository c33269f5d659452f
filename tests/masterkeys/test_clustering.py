"""Depthwise extraction, sign- and scale-invariant clustering, assignment to the 8 master keys, and their CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score, silhouette_score
from torch import nn

from fl_core.cli import main
from fl_core.io.models import LoadedModel, load_model
from fl_core.io.preprocessing import InputConfig
from fl_core.io.specs import ModelSpec
from fl_core.masterkeys.assignment import assign_to_master_keys, fit_model_master_keys
from fl_core.masterkeys.clustering import MasterKeySettings, analyze_master_keys
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.fitting import fit_published_filters, idealized_templates
from fl_core.masterkeys.kmeans import (
    centred_unit_vectors,
    cluster_filters,
    cluster_sweep,
    kmeans_plus_plus,
    lloyd_abs_cosine,
    silhouette_abs_cosine,
)
from fl_core.masterkeys.scalespace import (
    affine_fit_to_templates,
    centred_cosine,
    idealized_filter,
    load_published_filters,
)


def fixture_path(loaded: LoadedModel) -> str:
    """The checkpoint file of a ``library:NAME=PATH`` fixture."""
    return ModelSpec.parse(loaded.spec).path


class TinyDepthwiseNet(nn.Module):
    """stem 3×3 → depthwise 7×7 → pointwise → stride-2 depthwise 3×3 → pool → linear (deterministic, no BN)."""

    def __init__(self, dw7: torch.Tensor | None = None, channels: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.dw7 = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.pw = nn.Conv2d(channels, channels, 1)
        self.dw3 = nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels)
        self.head = nn.Linear(channels, classes)
        if dw7 is not None:
            with torch.no_grad():
                self.dw7.weight.copy_(dw7.reshape(channels, 1, 7, 7))

    def forward(self, x):
        x = torch.relu(self.pw(torch.relu(self.dw7(torch.relu(self.stem(x))))))
        return self.head(torch.relu(self.dw3(x)).mean(dim=(2, 3)))


def tiny_loaded(dw7: torch.Tensor | None = None, channels: int = 16, seed: int = 0) -> LoadedModel:
    torch.manual_seed(seed)
    model = TinyDepthwiseNet(dw7, channels).eval().requires_grad_(False)
    return LoadedModel(spec="test:tiny_dw", label="tiny depthwise net", model=model, state_dict=model.state_dict(),
                       input_config=InputConfig(input_size=32, crop_pct=1.0),
                       class_names=("a", "b", "c", "d"))


def planted_filters(n_per_cluster: int, prototypes: np.ndarray, noise: float, seed: int = 0):
    """Members a·(prototype + noise) + b with random sign, scale over 2 decades and DC offset."""
    rng = np.random.default_rng(seed)
    k = len(prototypes)
    truth = np.repeat(np.arange(k), n_per_cluster)
    shapes = prototypes[truth] + noise * rng.standard_normal((len(truth), *prototypes.shape[1:]))
    sign = rng.choice([-1.0, 1.0], len(truth))
    scale = 10 ** rng.uniform(-1, 1, len(truth))
    offset = rng.normal(0, 0.3, len(truth))
    filters = sign[:, None, None] * scale[:, None, None] * shapes + offset[:, None, None]
    return torch.tensor(filters, dtype=torch.float32), truth


def orthogonal_prototypes(k: int, size: int = 7, seed: int = 0) -> np.ndarray:
    """k zero-mean, unit-norm, mutually orthogonal k×k patterns (|cos| = 0 between clusters)."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((size * size, k))
    basis -= basis.mean(axis=0)
    return np.linalg.qr(basis)[0].T.reshape(k, size, size)


@pytest.fixture(scope="module")
def published():
    return load_published_filters()


def test_clustering_recovers_planted_clusters_under_random_signs_scales_and_offsets(published):
    filters, truth = planted_filters(60, published, noise=0.03)  # keys 7 and 8 have |cos| 0.9
    clustering = cluster_filters(filters, 8, restarts=4, seed=1, device="cpu")
    assert adjusted_rand_score(truth, clustering.labels) > 0.99
    similarity = np.abs(centred_cosine(clustering.centroids[:, None], published[None]))
    assert np.all(similarity.max(axis=1) > 0.98)
    assert sorted(similarity.argmax(axis=1)) == list(range(8))  # every key found once
    assert clustering.sizes.sum() == len(filters) and np.all(clustering.sizes == 60)
    # members point like the majority of their cluster: the recovered signs match the planted ones up to one flip
    members = clustering.labels == clustering.labels[0]
    planted_sign = np.sign((filters.numpy()[members] - filters.numpy()[members].mean(axis=(1, 2), keepdims=True)
                            ).reshape(members.sum(), -1) @ clustering.centroids[clustering.labels[0]].ravel())
    np.testing.assert_array_equal(planted_sign, clustering.signs[members])


def test_clustering_ignores_the_sign_of_every_filter(published):
    filters, _ = planted_filters(20, published, noise=0.3, seed=3)
    flips = torch.tensor(np.random.default_rng(5).choice([-1.0, 1.0], len(filters)), dtype=torch.float32)
    a = cluster_filters(filters, 8, restarts=3, seed=2)
    b = cluster_filters(filters * flips[:, None, None], 8, restarts=3, seed=2)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.objective, b.objective, rtol=1e-6)


def test_tiny_filters_cluster_as_their_shapes(published):
    """Subnormal float32 filters (dead channels of real exports reach 1e-40) have unit centred vectors like any other,
    so the mean |cos| stays at most 1 and scaling a filter down changes nothing."""
    filters, _ = planted_filters(10, published, noise=0.1, seed=4)
    scales = torch.ones(len(filters))
    scales[::7] = torch.tensor([1e-20, 1e-36, 1e-39, 1e-40] * 3)[: len(scales[::7])]
    units = centred_unit_vectors(filters * scales[:, None, None])
    np.testing.assert_allclose(units.norm(dim=1).numpy(), 1.0, rtol=1e-3)
    a = cluster_filters(filters, 8, restarts=3, seed=2)
    b = cluster_filters(filters * scales[:, None, None], 8, restarts=3, seed=2)
    assert b.objective <= 1.0 and adjusted_rand_score(a.labels, b.labels) > 0.95


def test_kmeans_plus_plus_seeds_distinct_clusters():
    filters, truth = planted_filters(50, orthogonal_prototypes(8), noise=0.03, seed=7)
    units = centred_unit_vectors(filters)
    seeds = kmeans_plus_plus(units, 8, 20, torch.Generator().manual_seed(0))  # (20, 8, 49)
    picked = (units @ seeds.transpose(1, 2)).abs().argmax(dim=1).numpy()  # the member each seed is
    distinct = [len(set(truth[row])) for row in picked]
    assert np.mean(np.array(distinct) == 8) >= 0.9  # uniform draws: 8!/8^8 = 0.2 %


def test_lloyd_iterations_never_lower_the_objective():
    filters = torch.randn(300, 5, 5, generator=torch.Generator().manual_seed(0))
    units = centred_unit_vectors(filters)
    centroids = kmeans_plus_plus(units, 6, 3, torch.Generator().manual_seed(1))
    objectives = []
    for _ in range(12):  # one Lloyd step at a time
        objectives.append((units @ centroids.transpose(1, 2)).abs().max(dim=-1).values.mean(dim=1))
        centroids, _ = lloyd_abs_cosine(units, centroids, max_iter=2, tol=-1.0)
    differences = torch.diff(torch.stack(objectives), dim=0)
    assert bool((differences >= -1e-6).all())


def test_silhouette_matches_scikit_learn():
    filters = torch.randn(120, 3, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    units = centred_unit_vectors(filters)
    labels = torch.tensor(np.random.default_rng(0).integers(0, 4, 120))
    labels[:1] = 5  # a singleton cluster (silhouette 0 by convention)
    distance = np.clip(1 - np.abs(units.numpy() @ units.numpy().T), 0, None)
    np.fill_diagonal(distance, 0)
    expected = silhouette_score(distance, labels.numpy(), metric="precomputed")
    assert silhouette_abs_cosine(units, labels, 6) == pytest.approx(expected, abs=1e-9)


def test_sweep_prefers_the_planted_number_of_clusters():
    filters, _ = planted_filters(30, orthogonal_prototypes(5), noise=0.05, seed=2)
    sweep = cluster_sweep(filters, [3, 4, 5, 6, 7], restarts=3, seed=0)
    assert sweep.best_k == 5
    assert list(sweep.mean_abs_cosine) == sorted(sweep.mean_abs_cosine)  # the elbow curve rises
    gains = np.diff(sweep.mean_abs_cosine)
    assert gains[1] > 5 * gains[2]  # the elbow: 4 → 5 clusters helps, 5 → 6 hardly


def test_constant_filters_are_not_clustered_or_counted(published):
    filters, _ = planted_filters(10, published, noise=0.05)
    filters = torch.cat([filters, torch.zeros(3, 7, 7), torch.full((2, 7, 7), 0.4)])
    clustering = cluster_filters(filters, 8, restarts=2)
    assert list(clustering.labels[-5:]) == [-1] * 5 and clustering.sizes.sum() == 80
    layer = np.zeros(len(filters), dtype=int)
    loaded = tiny_loaded(filters[:16])
    assignment = assign_to_master_keys(filters, layer, depthwise_bank(loaded).layers[:1])
    assert assignment.n_constant == 5 and assignment.counts.sum() == 80
    with pytest.raises(Exception, match="choose k"):
        cluster_filters(torch.zeros(10, 3, 3), 2)


def test_published_filters_planted_in_a_network_are_found_and_assigned_to_themselves(published):
    rng = np.random.default_rng(0)
    planted = np.concatenate([published, published]) * rng.choice([-1, 1], (16, 1, 1)) * rng.uniform(
        0.1, 3, (16, 1, 1)) + rng.normal(0, 0.2, (16, 1, 1))
    loaded = tiny_loaded(torch.tensor(planted, dtype=torch.float32))
    result = analyze_master_keys(loaded, settings=MasterKeySettings(k=8, kernel_size=7, restarts=4, seed=0))
    assignment = result.published_assignment
    np.testing.assert_array_equal(assignment.counts, [2] * 8)
    np.testing.assert_array_equal(assignment.fit.assignment, np.tile(np.arange(8), 2))
    assert "published" in assignment.templates
    assert sorted(c.master_key for c in result.clusters) == list(range(1, 9))
    assert all(abs(c.master_key_cosine) > 0.999 and c.size == 2 for c in result.clusters)
    payload = json.loads(result.to_json())
    assert payload["k"] == 8 and payload["n_filters"] == 16
    assert payload["published_assignment"]["counts"] == [2] * 8
    assert all(np.shape(c["centroid"]) == (7, 7) for c in payload["clusters"])


def test_tiny_network_layers_stages_and_kernel_sizes():
    loaded = tiny_loaded()
    bank = depthwise_bank(loaded)
    assert [(lay.name, lay.kernel_size, lay.stage, lay.resolution) for lay in bank.layers] == [
        ("dw7", 7, 0, 32), ("dw3", 3, 1, 16)]
    assert bank.kernel_sizes == {7: 16, 3: 16} and bank.stages == {0: "stage 0 (32×32)", 1: "stage 1 (16×16)"}
    bank.weights["dw7.weight"].zero_()  # a private copy: the model is untouched
    assert loaded.model.dw7.weight.abs().sum() > 0
    with pytest.raises(Exception, match="no depthwise layer"):
        bank.select(7, layers=["stem"])


@pytest.mark.slow
def test_mobilenet_extraction_stages_and_assignment(mobilenet):
    result = analyze_master_keys(mobilenet, settings=MasterKeySettings(restarts=2, seed=0))
    assignment = result.published_assignment
    assert result.kernel_size == 3 and result.n_filters == 7136 and len(result.layer_statistics) == 17
    assert assignment.stages == ("stage 0 (112×112)", "stage 1 (56×56)", "stage 2 (28×28)", "stage 3 (14×14)",
                                 "stage 4 (7×7)")
    assert "idealized models (method B) at 3×3" in assignment.templates
    filters = np.concatenate([mobilenet.state_dict[f"{name}.weight"].numpy().reshape(-1, 3, 3)
                              for name in assignment.layers])
    direct = affine_fit_to_templates(filters, idealized_templates("B", 3)).assignment
    shaped = np.ptp(filters.reshape(len(filters), -1), axis=1) > 0
    np.testing.assert_array_equal(assignment.counts, np.bincount(direct[shaped], minlength=8))
    np.testing.assert_array_equal(assignment.counts_per_stage.sum(axis=0), assignment.counts)
    assert assignment.counts_per_layer.sum() + assignment.n_constant == 7136
    assert result.clusters[0].size >= result.clusters[-1].size
    assert 0.8 < result.objective < 0.95  # trained 3×3 filters: tight clusters (random ones: ≈ 0.5)


@pytest.mark.slow
def test_weights_only_file_gives_the_same_filters_as_the_full_model(mobilenet):
    weights_only = depthwise_bank(load_model(f"weights:{fixture_path(mobilenet)}"))
    full = depthwise_bank(mobilenet)
    assert [lay.name for lay in weights_only.layers] == [lay.name for lay in full.layers]
    for key, tensor in full.weights.items():
        assert torch.equal(weights_only.weights[key], tensor)
    assert all(lay.resolution is None for lay in weights_only.layers)


def test_model_master_keys_recover_planted_sigmas():
    rng = np.random.default_rng(1)
    planted = {5: (1.2, 0.8), 6: (0.9, 1.1), 8: (0.7, 0.6)}
    shapes = np.stack([idealized_filter(key, *sigmas) for key, sigmas in planted.items() for _ in range(5)])
    filters = shapes * rng.choice([-1, 1], (15, 1, 1)) * rng.uniform(0.5, 2, (15, 1, 1))
    loaded = tiny_loaded(torch.tensor(np.concatenate([filters, filters[:1]]), dtype=torch.float32))
    result = fit_model_master_keys(loaded, "B", kernel_size=7)
    fitted = {fit.index: (fit.sigma_x, fit.sigma_y) for fit in result.filters}
    assert set(fitted) == set(planted)
    for key, sigmas in planted.items():  # key 8: the centred mean gets its background back from the DC fit (B.3)
        np.testing.assert_allclose(fitted[key], sigmas, atol=0.002)
    assert "per-key mean filters of tiny depthwise net" in result.source


@pytest.mark.slow
def test_cli_masterkeys_and_scalespace_json(tmp_path, mobilenet):
    spec = f"weights:{fixture_path(mobilenet)}"
    assert main(["masterkeys", "--model", spec, "--k", "5", "--restarts", "2", "--stage", "6", "--quiet",
                 "--json", str(tmp_path / "mk.json"), "--csv", str(tmp_path / "mk.csv")]) == 0
    payload = json.loads((tmp_path / "mk.json").read_text())
    assert payload["k"] == 5 and payload["n_filters"] == 2880  # stage 6 = the three 960-wide layers (by width)
    assert sum(c["size"] for c in payload["clusters"]) + payload["n_constant"] == 2880
    assert len(payload["published_assignment"]["counts"]) == 8
    assert (tmp_path / "mk.csv").read_text().startswith("model,spec,cluster,size")
    assert main(["scalespace", "--method", "C2", "--quiet", "--json", str(tmp_path / "ss.json")]) == 0
    payload = json.loads((tmp_path / "ss.json").read_text())
    assert payload["method"] == "C2" and [f["index"] for f in payload["filters"]] == list(range(1, 9))
    assert payload["filters"][4]["sigma_x"] == pytest.approx(fit_published_filters("C2").filters[4].sigma_x)
    assert payload["filters"][6]["alpha"] is not None and payload["filters"][0]["alpha"] is None
    assert main(["scalespace", "--model", spec, "--quiet", "--json", str(tmp_path / "sm.json")]) == 0
    assert "per-key mean filters" in json.loads((tmp_path / "sm.json").read_text())["source"]
    assert main(["masterkeys", "--model", spec, "--model", spec, "--quiet"]) == 2


def test_a_weights_only_file_of_depthwise_layers_keeps_every_filter(tmp_path):
    """Four 96×1×7×7 depthwise convs (the PP-OCRv6 detector's shape): no tensor is taken for the first layer."""
    from fl_core.errors import AnalysisError
    from fl_core.io.checkpoints import save_state_dict
    from fl_core.io.layers import first_conv_name

    path = tmp_path / "dw.safetensors"
    save_state_dict({f"stages.{i}.dw.weight": torch.randn(96, 1, 7, 7) for i in range(4)}, path)
    loaded = load_model(f"weights:{path}")
    bank = depthwise_bank(loaded)
    assert sum(lay.n_filters for lay in bank.layers) == 384 and not bank.skipped
    with pytest.raises(AnalysisError, match="sees the image"):
        first_conv_name(loaded)
    save_state_dict({"stem.weight": torch.randn(96, 3, 3, 3), **{f"stages.{i}.dw.weight": torch.randn(96, 1, 7, 7)
                                                                  for i in range(4)}}, path)
    loaded = load_model(f"weights:{path}")
    assert first_conv_name(loaded) == "stem" and len(depthwise_bank(loaded).layers) == 4


def test_masterkeys_command_line_gives_the_settings_and_the_settings_are_a_cache_key():
    import argparse

    from fl_core.cli import masterkeys as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--model", "x", "--k", "5", "--stage", "1", "--stage", "2", "--sweep", "2-4",
                              "--method", "D1", "--max-iterations", "3"])
    settings = command.settings_of(args)
    assert settings == MasterKeySettings(k=5, stages=(1, 2), sweep=(2, 3, 4), method="D1", max_iterations=3)
    assert command.settings_of(parser.parse_args(["--model", "x"])) == MasterKeySettings()
    assert hash(MasterKeySettings(layers=["a", "b"])) == hash(MasterKeySettings(layers=("a", "b")))
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "x", "--k", "0"])


def test_analysis_follows_its_settings_and_fitting_model_keys_reports_progress():
    loaded = tiny_loaded()
    settings = MasterKeySettings(k=3, restarts=2, seed=4, kernel_size=3, sweep=(2, 3))
    result = analyze_master_keys(loaded, settings=settings, device="cpu")
    assert (result.k, result.seed, result.restarts, result.kernel_size) == (3, 4, 2, 3)
    assert result.sweep is not None and result.sweep.ks == (2, 3) and len(result.clusters) == 3
    assert result.objective == analyze_master_keys(loaded, settings=settings).objective  # seeded
    seen = []
    fit_model_master_keys(loaded, "B", kernel_size=7, progress=lambda f, m: seen.append(f))
    assert seen[0] == 0.0 and seen[-1] == 1.0
