"""Label and input variants, run analyses and the paper's claims: known answers and independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms import v2 as T

from fl_core.errors import DataError
from fl_core.firstlayer.energy import energy_profile, pearson, theory_profile
from fl_core.firstlayer.patches import PatchPCA, PatchStatistics
from fl_core.io.preprocessing import InputConfig
from fl_core.lab.claims import (
    PAPER_CLAIMS,
    pairs_differing_in,
    run_correlations,
    snapshot_trajectory,
    summarize_runs,
)
from fl_core.lab.experiments import SUITES, suite_runs
from fl_core.lab.runs import Run, RunSettings
from fl_core.lab.train import TrainHistory
from fl_core.lab.trainsets import (
    EnergyDeciles,
    TileScaling,
    crop_dataset,
    crops_pca,
    label_variant,
    patch_energy,
    random_labels,
)
from fl_core.settings import replace_settings

SMALL = 20  # training crops per photo: 220 crops, enough for every statistic here


@pytest.fixture(scope="module")
def crops():
    return crop_dataset("bundled", crops_per_image=SMALL)


@pytest.fixture(scope="module")
def pca(crops) -> PatchPCA:
    return crops_pca(crops, 3, device="cpu")


# ---------------------------------------------------------------------------------------------------------- data


def test_bundled_crops_are_labelled_by_photo_with_a_disjoint_validation_strip(crops) -> None:
    assert crops.train_x.shape == (11 * SMALL, 3, 32, 32) and crops.train_x.dtype == torch.uint8
    assert torch.equal(torch.bincount(crops.train_y), torch.full((11,), SMALL))
    assert set(crops.val_y.tolist()) == set(range(11)) and len(crops.classes) == 11


def test_an_imagefolder_tree_is_labelled_by_class_and_a_flat_folder_by_image(tmp_path) -> None:
    rng = np.random.default_rng(0)
    for cls in ("cats", "dogs", "owls"):
        (tmp_path / "tree" / cls).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (150, 170, 3), dtype=np.uint8)).save(tmp_path / "tree" / cls /
                                                                                     f"{i}.png")
    data = crop_dataset(str(tmp_path / "tree"), crops_per_image=5)
    assert data.classes == ("cats", "dogs", "owls")
    assert torch.equal(torch.bincount(data.train_y), torch.tensor([10, 10, 10]))
    assert set(data.val_y.tolist()) == {0, 1, 2}
    flat = crop_dataset(str(tmp_path / "tree" / "owls"), crops_per_image=5)
    assert flat.classes == ("0.png", "1.png") and torch.equal(torch.bincount(flat.train_y), torch.tensor([5, 5]))


def test_patch_stride_gives_the_covariance_of_exactly_those_patches() -> None:
    x = torch.randn(4, 3, 17, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for stride in (1, 3):
        patches = F.unfold(x, 3, stride=stride).transpose(1, 2).reshape(-1, 27)
        for chunk in (200, 2**23):  # several bands per image, and one
            stats = PatchStatistics((3, 3), device="cpu", chunk_elements=chunk, stride=stride)
            stats.update(x)
            assert stats.count == len(patches)
            torch.testing.assert_close(stats.covariance(), torch.cov(patches.T), rtol=1e-10, atol=1e-12)


# -------------------------------------------------------------------------------------------------- label variants


def test_random_labels_are_a_seeded_permutation(crops) -> None:
    shuffled = random_labels(crops.train_y, seed=3)
    assert torch.equal(shuffled.sort().values, crops.train_y.sort().values)  # same multiset: class counts kept
    assert (shuffled != crops.train_y).float().mean() > 0.8  # the image-label link is broken
    assert torch.equal(shuffled, random_labels(crops.train_y, seed=3))
    assert not torch.equal(shuffled, random_labels(crops.train_y, seed=4))
    split = label_variant(crops, "random", seed=3)
    assert torch.equal(split.train_y, shuffled) and split.classes == crops.classes
    assert torch.equal(torch.bincount(split.val_y, minlength=11), torch.bincount(crops.val_y, minlength=11))


@pytest.mark.slow
def test_energy_labels_are_deciles_of_the_stated_patch_energy(crops, pca) -> None:
    component = 5
    split = label_variant(crops, "energy", pca=pca, component=component)
    u = torch.from_numpy(pca.components[component - 1])
    x = crops.normalize(crops.train_x).double()
    energy = ((u.view(1, -1, 1) * F.unfold(x, 3)).sum(1) ** 2).sum(1)  # E_u(X) = Σ_i (P_iᵀu)², every patch
    stated = patch_energy(crops.normalize(crops.train_x), pca.components[component - 1], pca.kernel)
    torch.testing.assert_close(stated, energy)
    counts = torch.bincount(split.train_y, minlength=10)
    assert counts.min() >= len(x) // 10 and counts.max() <= len(x) // 10 + 1  # equal-size deciles
    lows = [energy[split.train_y == d].min() for d in range(10)]
    highs = [energy[split.train_y == d].max() for d in range(10)]
    assert all(lows[d] >= highs[d + 1] for d in range(9))  # decile 0 = the top tenth, then downwards
    assert torch.equal(split.deciles.labels(stated), split.train_y)  # held-out rule reproduces the training labels
    assert split.classes[0] == f"decile 1 of E_{component}"


def test_energy_deciles_need_enough_images() -> None:
    with pytest.raises(DataError):
        EnergyDeciles.fit(torch.arange(5.0), 1)


# --------------------------------------------------------------------------------------------------- input variant


def test_tile_scaling_applies_the_app_d2_formula_tile_by_tile(pca) -> None:
    scaling = TileScaling.from_pca(pca, 4, 2.5)
    x = torch.randn(2, 3, 11, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = scaling(x)
    basis = torch.from_numpy(pca.components)
    expected = x.clone()
    for top in range(0, 9, 3):
        for left in range(0, 10 - 2, 3):
            tile = x[:, :, top: top + 3, left: left + 3].reshape(2, -1)
            coefficients = tile @ basis.T
            coefficients[:, 3] *= 2.5  # α⟨P,u_t⟩u_t + Σ_{j≠t}⟨P,u_j⟩u_j
            expected[:, :, top: top + 3, left: left + 3] = (coefficients @ basis).reshape(2, 3, 3, 3)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out[..., 9:, :], x[..., 9:, :])  # rows past the last whole tile: unchanged


@pytest.mark.slow
def test_alpha_changes_exactly_one_eigenvalue_as_predicted(crops) -> None:
    base = crops_pca(crops, 3, stride=3, device="cpu")
    component, alpha = 6, 3.0
    scaled = crops_pca(crops, 3, T.Compose([crops.normalize, TileScaling.from_pca(base, component, alpha)]),
                       stride=3, device="cpu")
    predicted = base.with_scaled_component(component - 1, alpha)
    np.testing.assert_allclose(scaled.lambdas, predicted.lambdas, rtol=1e-4)
    moved = int(np.argmin(np.abs(scaled.lambdas - alpha * base.lambdas[component - 1])))
    assert scaled.lambdas[moved] == pytest.approx(alpha * base.lambdas[component - 1], rel=1e-4)  # λ_t -> α λ_t
    np.testing.assert_allclose(np.delete(scaled.lambdas, moved), np.delete(base.lambdas, component - 1),
                               rtol=1e-4)  # … and every other eigenvalue stays
    assert abs(scaled.components[moved] @ base.components[component - 1]) == pytest.approx(1.0, abs=1e-4)


# ---------------------------------------------------------------------------------------------------- trajectories


def planted_snapshots(pca: PatchPCA, taus, seed: int = 0, scale: float = 1.0) -> dict[int, np.ndarray]:
    """Snapshots w_t = w_0 + (filters whose profile is the theory at τ_t): one filter per component."""
    init = np.random.default_rng(seed).normal(0, 1e-3, (pca.dim, *pca.kernel))
    snaps = {0: init}
    for step, tau in enumerate(taus, start=1):
        update = np.diag(theory_profile(pca.lambdas, tau)) @ pca.components * scale
        snaps[10 * step] = init + update.reshape(init.shape)
    return snaps


def test_planted_trajectory_is_fitted_exactly_and_eta_t_grows(pca) -> None:
    taus = [0.01, 0.1, 1.0, 10.0]
    traj = snapshot_trajectory("planted", planted_snapshots(pca, taus), pca)
    assert np.isnan(traj.r[0]) and traj.steps.tolist() == [0, 10, 20, 30, 40]
    np.testing.assert_allclose(traj.r[1:], 1.0, atol=1e-6)
    np.testing.assert_allclose(traj.eta_t[2:], taus[1:], rtol=0.02)  # τ = 0.01 sits in the ∝ λ regime
    assert traj.eta_t_trend == pytest.approx(1.0)
    assert traj.vs_init[0] == pytest.approx(1.0) and traj.raw_r[-1] == pytest.approx(1.0, abs=1e-3)
    frame = traj.to_frame()
    assert len(frame) == 5 * pca.dim and set(frame.columns) >= {"step", "component", "profile_minus_init"}


def fake_run(name: str, config: RunSettings, snapshots: dict[int, np.ndarray], pca: PatchPCA,
             val_accuracy: float = 0.5, reference_pca: PatchPCA | None = None) -> Run:
    """A run with given snapshots and accuracy, without training."""
    history = TrainHistory(steps=[max(snapshots)], train_loss=[1.0], train_accuracy=[0.5], val_loss=[1.0],
                           val_accuracy=[val_accuracy], seconds=1.0, snapshots=snapshots)
    return Run(name=name, config=config, history=history, classes=("a", "b"), input_config=InputConfig(32, 0.25),
               arch_kwargs={}, first_layer="features.0", pca=pca, reference_pca=reference_pca)


def test_claims_pair_runs_by_configuration_and_match_direct_correlations(pca) -> None:
    base = RunSettings()
    early, late = planted_snapshots(pca, [0.05], seed=0), planted_snapshots(pca, [0.05, 5.0], seed=1)
    runs = [fake_run("true_s0", base, early, pca, 0.80),
            fake_run("true_s1", replace_settings(base, {"seed": 1}), planted_snapshots(pca, [0.06], seed=2), pca),
            fake_run("random_s0", replace_settings(base, {"labels": "random", "steps": 3000}), late, pca),
            fake_run("frozen_s0", replace_settings(base, {"freeze_first": True}), {0: early[0], 10: early[0]}, pca,
                     0.74)]
    assert [(a.name, b.name) for a, b in pairs_differing_in(runs, "labels")] == [("true_s0", "random_s0")]
    assert [(a.name, b.name) for a, b in pairs_differing_in(runs, "seed")] == [("true_s0", "true_s1")]
    claims = {c.key: c for c in summarize_runs(runs).claims}
    moved = {r.name: r.final_weights - r.init_weights for r in runs}

    def r(a, b):
        return pearson(energy_profile(moved[a], pca), energy_profile(moved[b], pca))

    assert claims["seeds"].ours == pytest.approx(r("true_s0", "true_s1")) and claims["seeds"].n == 1
    assert claims["true_vs_random"].ours == pytest.approx(r("true_s0", "random_s0"))
    assert claims["true_vs_random"].ours < 0.9  # final profiles at ηt = 0.05 and 5: different times
    assert claims["true_vs_random"].matched == pytest.approx(1.0, abs=1e-6)  # random_s0 at its ηt = 0.05 step
    assert "random_s0 (step 10)" in claims["true_vs_random"].matched_detail
    assert claims["frozen"].ours == pytest.approx(-6.0)  # 74 % frozen vs 80 % trained, in points
    assert claims["theory_fit"].ours == pytest.approx(1.0, abs=1e-6) and claims["theory_fit"].n == 2
    assert claims["widths"].ours is None and claims["widths"].n == 0
    assert claims["random_init_fit"].n == 10 and claims["seeds"].paper_value == 0.99
    frame = summarize_runs(runs).to_frame()
    assert list(frame.columns[:4]) == ["claim", "source", "paper", "ours"] and "not run" in set(frame["ours"])
    corr = run_correlations(runs)
    assert corr.matrix[0, 2] == pytest.approx(r("true_s0", "random_s0")) and np.isnan(corr.matrix[3, 0])


def test_the_paper_suite_tests_every_claim(pca) -> None:
    runs = []
    for i, item in enumerate(SUITES["paper"]):
        snaps = planted_snapshots(pca, [0.1 * (i + 1), 0.5 * (i + 1), 2.0 * (i + 1)], seed=i)
        if item.config.train.freeze_first:
            snaps = dict.fromkeys(snaps, snaps[0])
        runs.append(fake_run(item.name, item.config, snaps, pca,
                             reference_pca=pca if item.config.manipulated else None))
    claims = summarize_runs(runs).claims
    assert {c.key for c in claims} == set(PAPER_CLAIMS)
    assert all(c.n > 0 for c in claims), [c.key for c in claims if c.n == 0]
    assert all(item.name.startswith("lab_") for item in SUITES["paper"])


def test_suites_move_to_other_data_and_scale_their_steps() -> None:
    runs = suite_runs("quick", images="/data/tree", max_images=50, steps_scale=0.5)
    assert {r.config.images for r in runs} == {"/data/tree"}
    assert runs[0].config.train.steps == RunSettings().train.steps // 2
    with pytest.raises(DataError):
        suite_runs("nope")
