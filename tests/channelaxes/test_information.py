"""Target-axis estimators against closed forms and independent numpy computations on planted Gaussians."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import ndtri
from scipy.stats import rankdata

from fl_core.channelaxes.information import (
    copula_normalize,
    gaussian_copula_mi,
    gaussian_mi,
    gaussian_mi_sets,
    logit_margin,
    mmi_pid,
    pairwise_information,
    target_excess,
    triplet_synergy,
)


def gaussian_pair(n: int, rhos: list[float], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y ~ N(0, 1) and channels x_c with corr(x_c, y) = rhos[c]."""
    rng = np.random.default_rng(seed)
    y = rng.normal(size=n)
    rho = np.asarray(rhos)
    x = rho * y[:, None] + np.sqrt(1 - rho**2) * rng.normal(size=(n, len(rhos)))
    return torch.from_numpy(x), torch.from_numpy(y)


def residual_partial_correlation(a: np.ndarray, b: np.ndarray, given: np.ndarray) -> float:
    """Correlation of the least-squares residuals of a and b on ``given`` (with intercept)."""
    design = np.column_stack([np.ones(len(a)), given])
    residuals = [v - design @ np.linalg.lstsq(design, v, rcond=None)[0] for v in (a, b)]
    return float(np.corrcoef(*residuals)[0, 1])


def test_gaussian_mi_recovers_known_correlation() -> None:
    rhos = [0.0, 0.3, 0.6, 0.9]
    n = 20000
    x, y = gaussian_pair(n, rhos, seed=0)
    estimate = gaussian_mi(x, y).numpy()
    truth = -0.5 * np.log(1 - np.asarray(rhos) ** 2)
    np.testing.assert_allclose(estimate, truth, atol=5 / math.sqrt(n))
    assert gaussian_mi(torch.ones(50, 1), torch.randn(50)).item() == 0.0


def test_log_determinant_form_equals_scalar_form() -> None:
    x, y = gaussian_pair(500, [0.2, -0.7], seed=1)
    scalar = gaussian_mi(x, y)
    for c in range(2):
        assert gaussian_mi_sets(x[:, c], y).item() == pytest.approx(scalar[c].item(), abs=1e-12)


def test_set_mi_matches_population_value() -> None:
    rng = np.random.default_rng(2)
    mixing = rng.normal(size=(5, 5))
    cov = mixing @ mixing.T + np.eye(5)
    samples = torch.from_numpy(rng.multivariate_normal(np.zeros(5), cov, size=40000))
    s, t = samples[:, :3], samples[:, 3:]
    logdets = [np.linalg.slogdet(block)[1] for block in (cov[:3, :3], cov[3:, 3:], cov)]
    truth = 0.5 * (logdets[0] + logdets[1] - logdets[2])
    assert gaussian_mi_sets(s, t).item() == pytest.approx(truth, abs=0.02)
    assert gaussian_mi_sets(s, t).item() == pytest.approx(gaussian_mi_sets(t, s).item(), abs=1e-12)
    assert gaussian_mi_sets(s, t, shrinkage=0.5).item() < gaussian_mi_sets(s, t).item()


def test_mmi_atoms_sum_to_joint_information() -> None:
    rng = np.random.default_rng(3)
    s1, s2 = rng.normal(size=(2, 3000))
    target = s1 + 0.5 * s2 + 0.3 * rng.normal(size=3000)
    pid = mmi_pid(torch.from_numpy(s1), torch.from_numpy(s2), torch.from_numpy(target))
    joint = gaussian_mi_sets(torch.from_numpy(np.column_stack([s1, s2])), torch.from_numpy(target)).item()
    total = pid.redundancy + pid.unique_1 + pid.unique_2 + pid.synergy
    assert total == pytest.approx(joint, abs=1e-12)
    assert pid.joint_information == pytest.approx(joint, abs=1e-12)
    assert pid.redundancy == pytest.approx(min(gaussian_mi(torch.from_numpy(np.column_stack([s1, s2])),
                                                           torch.from_numpy(target)).tolist()), abs=1e-12)
    assert pid.unique_2 == 0.0 and pid.unique_1 > 0.5  # s1 carries more, so only it has unique information
    assert pid.synergy > 0.1  # both together predict the target far better than either alone


def planted_target_channels(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Channel 0 alone carries one target component, channel 2 is a near-copy of channel 1, 3-5 are noise."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 6))
    x = z.copy()
    x[:, 2] = z[:, 1] + 0.01 * rng.normal(size=n)
    margin = z[:, 0] + z[:, 1] + 0.5 * rng.normal(size=n)
    return torch.from_numpy(x), torch.from_numpy(margin)


def test_target_excess_equals_partial_correlation_formula() -> None:
    x, m = planted_target_channels(2000, seed=4)
    peer_sets = torch.tensor([[1, 2], [2, 3], [1, 0], [4, 5], [3, 0], [4, 1]])
    with_peers = target_excess(x, m, peer_sets).numpy()
    all_peers = target_excess(x, m).numpy()
    xs, ms = x.numpy(), m.numpy()
    for i, peers in enumerate(peer_sets.tolist()):
        rho = residual_partial_correlation(xs[:, i], ms, xs[:, peers])
        assert with_peers[i] == pytest.approx(-0.5 * math.log(1 - rho**2), abs=1e-10)
        # the chain-rule form I(x_i, x_P; m) − I(x_P; m)
        chain = gaussian_mi_sets(x[:, [i, *peers]], m) - gaussian_mi_sets(x[:, peers], m)
        assert with_peers[i] == pytest.approx(chain.item(), abs=1e-10)
        rest = [j for j in range(6) if j != i]
        rho_all = residual_partial_correlation(xs[:, i], ms, xs[:, rest])
        assert all_peers[i] == pytest.approx(-0.5 * math.log(1 - rho_all**2), abs=1e-10)


def test_target_excess_separates_copy_from_sole_carrier() -> None:
    x, m = planted_target_channels(4000, seed=5)
    peer_sets = torch.tensor([[1, 3], [0, 2], [1, 0], [4, 5], [3, 5], [3, 4]])
    excess = target_excess(x, m, peer_sets)
    assert excess[2].item() < 0.01  # a near-copy of peer 1 adds nothing beyond it
    assert excess[0].item() > 0.3  # the only channel with component z0
    assert excess[0].item() > 10 * excess[2].item()
    assert gaussian_mi(x, m)[2].item() > 0.2  # although the copy alone is informative (≈ 0.29 nats)


def test_copula_normalize_handles_ties_like_average_ranks() -> None:
    values = np.array([[3.0, 1.0], [1.0, 1.0], [3.0, 2.0], [2.0, 1.0], [3.0, 0.0]])
    expected = ndtri(rankdata(values, axis=0, method="average") / (len(values) + 1))
    np.testing.assert_allclose(copula_normalize(torch.from_numpy(values)).numpy(), expected, atol=1e-14)
    one_column = copula_normalize(torch.from_numpy(values[:, 0]))
    assert one_column.shape == (5,)
    np.testing.assert_allclose(one_column.numpy(), expected[:, 0], atol=1e-14)


def test_copula_mi_is_invariant_to_monotone_transforms() -> None:
    x, y = gaussian_pair(3000, [0.5, -0.8], seed=6)
    plain = gaussian_copula_mi(x, y)
    transformed = gaussian_copula_mi(torch.exp(3 * x) + x**3, y**3)
    torch.testing.assert_close(plain, transformed, rtol=0, atol=1e-12)
    truth = -0.5 * np.log(1 - np.array([0.5, 0.8]) ** 2)
    np.testing.assert_allclose(plain.numpy(), truth, atol=0.05)
    assert gaussian_mi(torch.exp(3 * x), y)[1].item() < plain[1].item() - 0.1  # the plain estimate is not


def test_pairwise_information_matches_mmi_pid_per_pair() -> None:
    x, m = planted_target_channels(1500, seed=7)
    peer_sets = torch.tensor([[1, 3, 4], [0, 2, 5], [1, 0, 3], [4, 5, 0], [3, 0, 1], [3, 4, 2]])
    result = pairwise_information(x, m, peer_sets)
    for i, peers in enumerate(peer_sets.tolist()):
        atoms = [mmi_pid(x[:, i], x[:, j], m) for j in peers]
        assert result.redundancy[i].item() == pytest.approx(np.mean([a.redundancy for a in atoms]), abs=1e-10)
        assert result.synergy[i].item() == pytest.approx(np.mean([a.synergy for a in atoms]), abs=1e-10)
    torch.testing.assert_close(result.net_synergy, result.synergy - result.redundancy, rtol=0, atol=1e-12)
    assert result.k == 3


@pytest.mark.slow
def test_triplet_synergy_matches_brute_force_and_is_seeded() -> None:
    rng = np.random.default_rng(8)
    z = rng.normal(size=(3000, 5))
    m = torch.from_numpy(z[:, 0] + z[:, 1] + z[:, 2] + 0.1 * rng.normal(size=3000))
    x = torch.from_numpy(z)
    peer_sets = torch.tensor([[1, 2, 3], [0, 2, 4], [0, 1, 3], [0, 1, 2], [0, 1, 2]])
    exact = triplet_synergy(x, m, peer_sets, n_triplets=64, seed=3)
    assert exact.n_triplets == 3 and exact.seed == 3
    for i, peers in enumerate(peer_sets.tolist()):
        values = []
        for a in range(3):
            for b in range(a + 1, 3):
                j, l = peers[a], peers[b]
                pairs = ((i, j), (i, l), (j, l))
                pair_max = max(gaussian_mi_sets(x[:, list(pair)], m).item() for pair in pairs)
                values.append(gaussian_mi_sets(x[:, [i, j, l]], m).item() - pair_max)
        assert exact.synergy[i].item() == pytest.approx(np.mean(values), abs=1e-10)
    # with peers (1, 2) channel 0 completes the triple that predicts the sum: I ≈ 2.85 vs ≈ 0.55 for any pair
    assert exact.synergy[0].item() > 0.5

    sampled = triplet_synergy(x, m, peer_sets, n_triplets=2, seed=11)
    assert sampled.n_triplets == 2 and sampled.seed == 11
    again = triplet_synergy(x, m, peer_sets, n_triplets=2, seed=11)
    torch.testing.assert_close(sampled.synergy, again.synergy, rtol=0, atol=0)
    assert sampled.to_dict()["seed"] == 11


def test_logit_margin() -> None:
    logits = torch.tensor([[2.0, 0.5, 1.0], [0.1, 0.3, 3.0], [1.0, 1.0, -1.0]])
    margin = logit_margin(logits, torch.tensor([0, 1, 1]))
    torch.testing.assert_close(margin, torch.tensor([1.0, -2.7, 0.0]))
