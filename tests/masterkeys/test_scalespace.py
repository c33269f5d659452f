"""Tests of fl_core.masterkeys.scalespace and fl_core.masterkeys.fitting against docs/methods.md, "Scale-space models".

Oracle: pyscsp (Lindeberg's own package, a test dependency) for the discrete Gaussian, its central-difference
derivative approximations, the separable models and the spatial moments, at several σ to ~1e-13.

Golden numbers: B.1 worked example, B.3 normalisation, B.4 spread measures, B.5 σ table (full-precision
values of ``filteranal.keyfiltersigmahat`` where the authors' code has them; method A only to 3 decimals).

σ-table agreement reached (max |Δσ| over filters 1-6 and 8, both axes) and the tolerance asserted:

    method  reached   asserted   why not exact
    A       0.00050   0.001      reference rounded to 3 decimals
    B       0.00002   0.0001     filter 8: our Ĉ8 is a lower minimum of √det V than the published one
    C1      0.00051   0.001      published values are points of a ~0.0005-step grid
    C2      0.00036   0.001      parabolic refinement on a different log grid
    D1      0.00025   0.001      published values are points of a ~0.0005-step grid
    D2      0.00008   0.0002     parabolic refinement on a different log grid

Filter 7 joint (σ, α) fit: l2 reached |Δσ| 0.00004, |Δα| 0.00001. l1 reached |Δσ| 0.0011 but |Δα| 0.029:
the published l1 point (0.65377, 0.52161) is not a minimum (not even a local one) of
Σ|δ - α∇²₅T(σ) - h₇,norm|; our minimum (0.6549, 0.4927) has a 7% lower l1 distance (0.600 vs 0.642),
see test_filter7_l1_fit_discrepancy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fl_core.errors import AnalysisError, DataError
from fl_core.masterkeys.fitting import (
    FIT_METHODS,
    fit_filter7,
    fit_published_filters,
    fit_scale,
    fit_scale_by_distance,
    fit_scale_method_a,
    fit_scale_method_b,
    idealized_templates,
)
from fl_core.masterkeys.scalespace import (
    PUBLISHED_FILTERS_PATH,
    affine_fit_to_templates,
    centred_cosine,
    dc_offset_minimizing_spread,
    difference_1d,
    difference_x,
    difference_y,
    discrete_gaussian,
    filter_mean,
    filter_variance,
    idealized_filter,
    laplacian_5point,
    load_published_filters,
    monomial_response,
    normalize_learned_filter,
    sqrt_det_spread,
    weighted_filter_mean,
    weighted_filter_variance,
)

# B.5 σ table: (σx, σy) per filter 1-8; None for filter 7 (fitted jointly with α, tested separately).
PUBLISHED_SIGMAS: dict[str, list[tuple[float, float] | None]] = {
    "A": [(0.581, 0.558), (0.559, 0.580), (0.617, 0.601), (0.642, 0.424), (1.075, 0.800), (0.771, 1.003),
          None, (0.552, 0.545)],
    "B": [(0.644467181641027, 0.5828832090268337), (0.5857839906147607, 0.6439526929438278),
          (0.6898322629693772, 0.6740337546526619), (0.756029853407984, 0.4595702668204834),
          (1.1066640009337496, 0.944777139036421), (0.9003583091930647, 0.888872322603157), None,
          (0.6094604392295698, 0.6011991729854481)],
    "C1": [(0.36015075376884426, 0.5104522613065327), (0.5546733668341708, 0.4531658291457286),
           (0.7006532663316583, 0.6551256281407035), (0.562713567839196, 0.3843718592964824),
           (1.3092964824120603, 0.8752763819095477), (0.9728140703517588, 1.1711557788944722), None,
           (0.6366331658291458, 0.5866331658291457)],
    "C2": [(s, s) if s is not None else None for s in (
        0.4580194313955851, 0.4482463177756579, 0.6711849867963244, 0.4203522130670464, 1.3873955463956178,
        1.0902606031644924, None, 0.6119728613663912)],
    "D1": [(0.4912060301507538, 0.7224120603015075), (0.581356783919598, 0.518643216080402),
           (0.48311557788944726, 0.5028643216080402), (0.5009547738693467, 0.0002),
           (1.299748743718593, 1.0042713567839197), (0.9842713567839196, 1.0737688442211055), None,
           (0.6156281407035176, 0.608140703517588)],
    "D2": [(s, s) if s is not None else None for s in (
        0.6440209979383456, 0.5580021518662255, 0.4951507717698759, 0.37962065829063185, 1.1934352970554198,
        1.0382624689911877, None, 0.6118535135425845)],
}  # fmt: skip
SIGMA_TOLERANCE = {"A": 1e-3, "B": 1e-4, "C1": 1e-3, "C2": 1e-3, "D1": 1e-3, "D2": 2e-4}
FILTER7_L2 = (0.6753768844221105, 0.5256281407035176)
FILTER7_L1 = (0.6537688442211055, 0.521608040201005)


@pytest.fixture(scope="module")
def published() -> np.ndarray:
    return load_published_filters()


# --- data file ------------------------------------------------------------------------------------


def test_published_filters_parse_with_orientation(published, tmp_path):
    assert published.shape == (8, 7, 7)
    assert published[0, 4, 3] == pytest.approx(0.936427)  # filter 1: main lobe one row below the centre
    assert published[6, 3, 3] == pytest.approx(0.982706)
    assert np.abs(published.sum(axis=(1, 2))).max() < 1e-5  # all roughly zero-mean
    lf_copy = tmp_path / "lf.txt"
    lf_copy.write_text(PUBLISHED_FILTERS_PATH.read_text().replace("\r\n", "\n"))
    np.testing.assert_array_equal(load_published_filters(lf_copy), published)


def test_malformed_filter_file_raises_data_error(tmp_path):
    broken = tmp_path / "broken.txt"
    broken.write_text("# header\nFilter 1:\n1 2 3\n")
    with pytest.raises(DataError, match="56 rows of 7"):
        load_published_filters(broken)
    with pytest.raises(DataError, match="Cannot read"):
        load_published_filters(tmp_path / "missing.txt")


# --- B.1 primitives -------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 3.5])
def test_discrete_gaussian_has_unit_mass_and_variance_sigma_squared(sigma):
    radius = int(12 * sigma) + 10
    kernel = discrete_gaussian(sigma, radius)
    n = np.arange(-radius, radius + 1)
    assert kernel.sum() == pytest.approx(1.0, abs=1e-12)
    assert (n**2 * kernel).sum() == pytest.approx(sigma**2, rel=1e-10)
    assert (n * kernel).sum() == pytest.approx(0.0, abs=1e-12)


def test_discrete_gaussian_truncation_and_renormalisation():
    truncated = discrete_gaussian(1.5, 3)
    assert truncated.sum() < 0.99  # filteranal path keeps the truncated taps
    assert discrete_gaussian(1.5, 3, sum_to_one=True).sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(discrete_gaussian(0.0, 2), [0, 0, 1, 0, 0])
    batch = discrete_gaussian(np.array([0.5, 1.0]), 3)
    np.testing.assert_allclose(batch[1], discrete_gaussian(1.0, 3))


def test_worked_example_sigma_half():
    kernel = discrete_gaussian(0.5, 3)
    expected = [0.00025, 0.00612, 0.09811, 0.79102, 0.09811, 0.00612, 0.00025]
    np.testing.assert_allclose(kernel, expected, atol=6e-6)
    np.testing.assert_allclose(
        difference_1d(kernel, "central"), [0.0029, 0.0489, 0.3925, 0, -0.3925, -0.0489, -0.0029], atol=6e-5
    )
    forward = difference_1d(kernel, "forward")
    np.testing.assert_allclose(forward, [0.0059, 0.0920, 0.6929, -0.6929, -0.0920, -0.0059, 0], atol=6e-5)
    # δ₋T is δ₊T shifted one step to the right.
    np.testing.assert_allclose(difference_1d(kernel, "backward")[1:], forward[:-1], atol=1e-15)


def test_difference_operators_on_ramps_and_laplacian_mask():
    rows, cols = np.mgrid[0:9, 0:9].astype(float)
    x, y_up = cols - 4, 4 - rows
    for kind in ("central", "forward", "backward"):
        np.testing.assert_allclose(difference_x(x, kind)[:, 1:-1], 1.0)
        np.testing.assert_allclose(difference_y(y_up, kind)[1:-1, :], 1.0)
        np.testing.assert_allclose(difference_y(x, kind), 0.0)
    np.testing.assert_allclose(difference_x(x**2, "second")[:, 1:-1], 2.0)
    # δ_{y+} f = f(y+1) - f(y): the pixel above minus the pixel itself.
    impulse = np.zeros((5, 5))
    impulse[2, 2] = 1.0
    dyp = difference_y(impulse, "forward")
    assert dyp[2, 2] == -1.0 and dyp[3, 2] == 1.0
    np.testing.assert_array_equal(laplacian_5point(impulse)[1:4, 1:4], [[0, 1, 0], [1, -4, 1], [0, 1, 0]])


# --- pyscsp (Lindeberg's own package) as the oracle of the discrete primitives ----------------------

ORACLE_SIGMAS = [0.3, 0.5, 0.67538, 1.0, 1.7, 3.5]


@pytest.fixture(scope="module")
def discscsp():
    """pyscsp's discrete scale-space module (a test dependency: requirements-dev.txt)."""
    return pytest.importorskip("pyscsp.discscsp", reason="pyscsp is the oracle of these tests: "
                               "pip install -r requirements-dev.txt")


@pytest.mark.parametrize("sigma", ORACLE_SIGMAS)
def test_discrete_gaussian_is_pyscsps_kernel(discscsp, sigma):
    """T(n; σ²) = e^{-s} I_n(s) against ``make1Ddiscgaussfilter``, which drops the tails once their mass is about
    ε: every tap it keeps is ours, and the mass it drops is exactly our taps beyond its support."""
    reference = discscsp.make1Ddiscgaussfilter(sigma, 1e-12)
    radius = len(reference) // 2
    np.testing.assert_allclose(discrete_gaussian(sigma, radius), reference, rtol=1e-13, atol=1e-300)
    wide = discrete_gaussian(sigma, radius + 40)
    assert wide.sum() == pytest.approx(1.0, abs=1e-14)
    beyond = wide.sum() - wide[40:-40].sum()
    assert beyond == pytest.approx(1 - reference.sum(), abs=1e-15) and beyond < 1e-10


@pytest.mark.parametrize("sigma", ORACLE_SIGMAS)
def test_discrete_gaussian_moments_are_pyscsps(discscsp, sigma):
    """Mean and variance of the kernel by pyscsp's ``mean1D``/``variance1D`` (1-D) and ``filtermean``/``variance``
    (2-D, y upward) against ours: the variance is σ² (the discrete Gaussian's defining property)."""
    radius = int(10 * sigma) + 10  # tails beyond it below 1e-16
    kernel = discrete_gaussian(sigma, radius)
    assert discscsp.variance1D(kernel) == pytest.approx(sigma**2, rel=1e-10)
    assert discscsp.mean1D(kernel) == pytest.approx(radius, abs=1e-12)  # pyscsp indexes from 0
    anisotropic = idealized_filter(8, sigma, 0.7 * sigma, size=2 * radius + 1)
    np.testing.assert_allclose(filter_variance(anisotropic), discscsp.variance(anisotropic), atol=1e-12)
    np.testing.assert_allclose(filter_variance(anisotropic), np.diag([sigma**2, (0.7 * sigma) ** 2]), rtol=1e-9,
                               atol=1e-15)
    np.testing.assert_allclose(filter_mean(anisotropic), discscsp.filtermean(anisotropic), atol=1e-12)


@pytest.mark.parametrize("sigma", ORACLE_SIGMAS)
@pytest.mark.parametrize(("order", "kind"), [(1, "central"), (2, "second")])
def test_derivative_approximations_are_pyscsps(discscsp, sigma, order, kind):
    """δ T and δ_xx T against ``make1Ddiscgaussderfilter`` (central differences of the discrete Gaussian, same
    reflecting border), on the 7-tap support of the master keys and a wide one."""
    for radius in (3, 10):
        expected = discscsp.make1Ddiscgaussderfilter(order, sigma, radius)
        np.testing.assert_allclose(difference_1d(discrete_gaussian(sigma, radius), kind), expected, atol=1e-15)


@pytest.mark.parametrize(("sigma_x", "sigma_y"), [(0.5, 0.9), (1.1, 0.6), (0.67538, 0.67538)])
def test_separable_models_are_products_of_pyscsp_kernels(discscsp, sigma_x, sigma_y):
    """Models 5 (δ_x T), 6 (δ_y T, y upward: rows reversed) and 8 (T) of table B.2 as outer products of pyscsp's
    1-D kernels; and their spatial means and covariances by pyscsp's ``filtermean``/``variance`` of |h|."""
    radius = 3
    smooth_x, smooth_y = (discscsp.make1Ddiscgaussderfilter(0, s, radius) for s in (sigma_x, sigma_y))
    deriv_x, deriv_y = (discscsp.make1Ddiscgaussderfilter(1, s, radius) for s in (sigma_x, sigma_y))
    expected = {5: np.outer(smooth_y, deriv_x), 6: np.outer(deriv_y[::-1], smooth_x), 8: np.outer(smooth_y, smooth_x)}
    for index, reference in expected.items():
        model = idealized_filter(index, sigma_x, sigma_y)
        np.testing.assert_allclose(model, reference, atol=1e-15)
        np.testing.assert_allclose(filter_mean(model), discscsp.filtermean(np.abs(model)), atol=1e-12)
        np.testing.assert_allclose(filter_variance(model), discscsp.variance(np.abs(model)), atol=1e-12)


def test_spread_measures_of_published_filters_are_pyscsps(discscsp, published):
    np.testing.assert_allclose(filter_variance(published), [discscsp.variance(np.abs(h)) for h in published],
                               atol=1e-12)
    np.testing.assert_allclose(filter_mean(published), [discscsp.filtermean(np.abs(h)) for h in published],
                               atol=1e-12)


# --- B.2 models: centres, signs, derivative normalisation -----------------------------------------


@pytest.mark.parametrize(
    ("index", "centre"),
    [(1, (0.0, -0.5)), (2, (0.5, 0.0)), (3, (0.0, 0.5)), (4, (-0.5, 0.0)), (5, (0.0, 0.0)), (6, (0.0, 0.0))],
)
def test_half_pixel_operators_have_the_stated_centres(index, centre):
    model = idealized_filter(index, 1.5, 1.2, size=31)  # large support: no border effects
    np.testing.assert_allclose(filter_mean(model), centre, atol=1e-9)


def test_y_up_convention_puts_delta_y_plus_below_the_centre():
    model = idealized_filter(1, 1.0, size=15)  # δ_{y+}T
    rows = np.arange(15)[:, None]
    mean_row = (np.abs(model) * rows).sum() / np.abs(model).sum()
    assert mean_row == pytest.approx(7.5, abs=1e-9)  # half a pixel *below* the centre row 7
    assert model[7, 7] < 0 < model[8, 7]  # same sign pattern as published filter 1
    # δ_{y-}T = T(y) - T(y-1): lobe pair centred half a pixel above the centre.
    model3 = idealized_filter(3, 1.0, size=15)
    assert model3[6, 7] < 0 < model3[7, 7]  # opposite sign to published filter 3 (row 2 +0.878, row 3 -0.355)


@pytest.mark.parametrize(("index", "direction"), [(1, "y"), (2, "x"), (3, "y"), (4, "x"), (5, "x"), (6, "y")])
def test_models_follow_gaussian_derivative_sign_and_normalisation(index, direction):
    model = idealized_filter(index, 1.0, 1.2, size=21)
    assert monomial_response(model, direction) == pytest.approx(1.0, abs=1e-6)  # truncation at radius 10
    other = "x" if direction == "y" else "y"
    assert monomial_response(model, other) == pytest.approx(0.0, abs=1e-9)


def test_smoothing_model_and_filter7_forms(published):
    gaussian = idealized_filter(8, 0.7, size=7)
    np.testing.assert_allclose(gaussian, np.outer(discrete_gaussian(0.7, 3), discrete_gaussian(0.7, 3)))
    impulse_form = idealized_filter(7, 0.6754, alpha=0.5256)
    impulse = np.zeros((7, 7))
    impulse[3, 3] = 1.0
    np.testing.assert_allclose(impulse_form, impulse - 0.5256 * laplacian_5point(idealized_filter(8, 0.6754)))
    gaussian_form = idealized_filter(7, 0.675, filter7_form="gaussian")  # γ = 0.5
    smooth = idealized_filter(8, 0.675)
    np.testing.assert_allclose(gaussian_form, smooth - 0.5 * laplacian_5point(smooth))
    # B.2: centred cosine with published filter 7 is 0.9975 (impulse) and 0.9874 (T - 0.5∇²T).
    assert centred_cosine(impulse_form, published[6]) == pytest.approx(0.9975, abs=5e-4)
    assert centred_cosine(gaussian_form, published[6]) == pytest.approx(0.9874, abs=5e-4)
    assert idealized_filter(8, 1.0, size=9, sum_to_one=True).sum() == pytest.approx(1.0)


def test_invalid_model_arguments_raise():
    with pytest.raises(ValueError, match="index"):
        idealized_filter(9, 1.0)
    with pytest.raises(ValueError, match="odd"):
        idealized_filter(1, 1.0, size=6)
    with pytest.raises(ValueError, match="method"):
        fit_scale(np.zeros((7, 7)), 1, "E")  # type: ignore[arg-type]
    with pytest.raises(AnalysisError, match="all zeros"):
        fit_scale(np.zeros((7, 7)), 5, "B")
    with pytest.raises(AnalysisError, match="no response"):
        normalize_learned_filter(idealized_filter(5, 1.0), 8)  # a derivative filter sums to 0


# --- B.3 normalisation and B.4 spread measures ----------------------------------------------------


def test_normalisation_reproduces_reference_numbers(published):
    responses = [1.5555, -1.3802, -1.0908, 0.8385, 7.7504, 6.1367]
    leakage = [-0.051, -0.287, -0.118, 0.035, -0.008, -0.026]
    for index in range(1, 7):
        result = normalize_learned_filter(published[index - 1], index)
        assert result.response == pytest.approx(responses[index - 1], abs=1e-4)
        other = "x" if index in (1, 3, 6) else "y"
        assert monomial_response(result.normalized, other) == pytest.approx(leakage[index - 1], abs=1e-3)
    norm7 = normalize_learned_filter(published[6], 7)
    norm8 = normalize_learned_filter(published[7], 8)
    assert norm7.dc_offset == pytest.approx(-0.011775, abs=2e-6)
    assert norm7.response == pytest.approx(0.57700, abs=1e-4)
    # Ĉ8: we find -0.038641, a slightly lower minimum of √det V than the published -0.038633 (a kink-rich,
    # non-smooth function); hence the sum 1.89340 instead of 1.89302.
    assert norm8.dc_offset == pytest.approx(-0.038633, abs=1e-5)
    published_c8 = -0.0386329733224079
    assert sqrt_det_spread(published[7] - norm8.dc_offset) <= sqrt_det_spread(published[7] - published_c8)
    assert norm8.response == pytest.approx(1.89302, abs=5e-4)
    for normalized in (norm7.normalized, norm8.normalized):
        assert normalized.sum() == pytest.approx(1.0)


def test_dc_offset_of_a_shifted_filter_is_found():
    rng = np.random.default_rng(0)
    peaked = idealized_filter(8, 0.6) + 1e-4 * rng.standard_normal((7, 7))
    assert dc_offset_minimizing_spread(peaked - 0.05) == pytest.approx(-0.05, abs=2e-3)


def test_spread_measures_of_published_filters(published):
    unweighted = [(1.799, 1.632), (1.328, 1.425), (1.584, 1.364), (1.635, 1.253), (3.847, 1.848),
                  (1.634, 3.347), (1.276, 1.547), (2.381, 2.356)]  # fmt: skip
    diagonals = np.diagonal(filter_variance(published), axis1=1, axis2=2)
    np.testing.assert_allclose(diagonals, unweighted, atol=1e-3)
    weighted = [(0.1686, 0.4663), (0.4685, 0.1683), (0.1903, 0.5416), (0.6192, 0.0900), (1.7324, 0.3203),
                (0.2973, 1.5104), (0.0178, 0.0452), (0.1524, 0.1487)]  # fmt: skip
    weighted_means = [(-0.005, -0.753), (0.665, -0.017), (0.011, 0.666), (-0.536, 0.006), (-0.012, -0.020),
                      (-0.006, -0.114), (0.003, -0.004), (-0.002, 0.008)]  # fmt: skip
    for index in range(1, 9):
        normalized = normalize_learned_filter(published[index - 1], index).normalized
        variance = weighted_filter_variance(normalized, index)
        np.testing.assert_allclose(np.diag(variance), weighted[index - 1], atol=1e-4)
        mean = weighted_filter_mean(normalized, index)
        np.testing.assert_allclose(mean, weighted_means[index - 1], atol=1e-3)
    means = filter_mean(published[:4])
    np.testing.assert_allclose(means[:, 1], [-0.602, 0.092, 0.693, 0.098], atol=1e-3)  # y up


def test_variance_of_a_discrete_gaussian_is_sigma_squared():
    model = idealized_filter(8, 1.5, 0.8, size=31)
    np.testing.assert_allclose(filter_variance(model), np.diag([1.5**2, 0.8**2]), atol=1e-9)
    np.testing.assert_allclose(filter_mean(model), [0, 0], atol=1e-12)


@pytest.mark.parametrize(("index", "ratios"), [(8, (0.5, 0.5)), (5, (1.5, 0.5)), (1, (0.5, 1.5))])
def test_continuous_relations_of_method_a_hold_at_large_sigma(index, ratios):
    # V(|h|·|h|) = σ²/2 along a smoothing axis and 3σ²/2 along a differentiated one (continuous limit).
    sigma = 4.0
    model = idealized_filter(index, sigma, size=41)
    variance = filter_variance(model, np.abs(model))
    np.testing.assert_allclose(np.diag(variance) / sigma**2, ratios, rtol=0.03)


# --- B.5 fits -------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [1, 2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("sigmas", [(0.5, 0.9), (1.0, 0.7), (1.3, 1.6)])
def test_spread_matching_round_trip_recovers_sigma(index, sigmas):
    model = idealized_filter(index, *sigmas)
    np.testing.assert_allclose(fit_scale_method_b(model, index), sigmas, atol=1e-4)
    np.testing.assert_allclose(fit_scale_by_distance(model, index, "l1", isotropic=False), sigmas, atol=1e-4)
    np.testing.assert_allclose(fit_scale_by_distance(model, index, "l2", isotropic=False), sigmas, atol=1e-4)
    if index != 8:  # normalisation by a scalar does not change V_w; filter 8 also removes a DC offset
        fit = fit_scale(model, index, "B")
        np.testing.assert_allclose((fit.sigma_x, fit.sigma_y), sigmas, atol=1e-4)
        assert fit.cosine_similarity == pytest.approx(1.0)


def test_method_a_is_close_to_sigma_ref_for_a_model_at_sigma_ref():
    # Weight = model at σ_ref = 1: the continuous relations are only approximate at this small scale.
    sigma_x, sigma_y = fit_scale_method_a(idealized_filter(8, 1.0), 8)
    assert 0.8 < sigma_x < 1.0 and sigma_x == pytest.approx(sigma_y)


@pytest.mark.parametrize(("sigma", "alpha"), [(0.8, 0.4), (0.6, 0.55), (1.2, 1.0)])
def test_filter7_joint_fit_round_trip(sigma, alpha):
    model = idealized_filter(7, sigma, alpha=alpha)
    for norm in ("l1", "l2"):
        np.testing.assert_allclose(fit_filter7(model, norm), (sigma, alpha), atol=1e-4)


@pytest.mark.parametrize("method", FIT_METHODS)
def test_published_sigma_table_is_reproduced(method):
    result = fit_published_filters(method)
    assert [fit.index for fit in result.filters] == list(range(1, 9))
    for fit, expected in zip(result.filters, PUBLISHED_SIGMAS[method]):
        if expected is None:
            continue
        assert fit.sigma_x == pytest.approx(expected[0], abs=SIGMA_TOLERANCE[method]), (method, fit.index)
        assert fit.sigma_y == pytest.approx(expected[1], abs=SIGMA_TOLERANCE[method]), (method, fit.index)
        assert fit.alpha is None


@pytest.mark.parametrize("method", ["A", "B", "D1", "D2"])
def test_filter7_l2_joint_fit(method):
    fit = fit_published_filters(method).filters[6]
    assert fit.sigma_x == fit.sigma_y == pytest.approx(FILTER7_L2[0], abs=1e-4)
    assert fit.alpha == pytest.approx(FILTER7_L2[1], abs=1e-4)


def test_filter7_l1_fit_discrepancy(published):
    fit = fit_published_filters("C1").filters[6]
    isotropic = fit_published_filters("C2").filters[6]
    assert (isotropic.sigma_x, isotropic.alpha) == (fit.sigma_x, fit.alpha)
    assert fit.sigma_x == pytest.approx(FILTER7_L1[0], abs=2e-3)
    assert fit.alpha == pytest.approx(FILTER7_L1[1], abs=0.03)  # see module docstring
    normalized = normalize_learned_filter(published[6], 7).normalized

    def l1(sigma: float, alpha: float) -> float:
        return float(np.abs(idealized_filter(7, sigma, alpha=alpha) - normalized).sum())

    assert l1(fit.sigma_x, fit.alpha) < 0.95 * l1(*FILTER7_L1)


def test_method_b_cosine_similarities(published):
    expected = [0.84, -0.94, -0.91, 0.91, 0.94, 0.95, 0.997, 0.997]
    result = fit_published_filters("B")
    np.testing.assert_allclose([fit.cosine_similarity for fit in result.filters], expected, atol=0.01)
    for method in FIT_METHODS:  # other methods within ±0.06 of method B
        cosines = [fit.cosine_similarity for fit in fit_published_filters(method).filters]
        np.testing.assert_allclose(cosines, expected, atol=0.07)


def test_result_json_contract():
    payload = json.loads(fit_published_filters("B").to_json())
    assert payload["method"] == "B"
    assert [entry["index"] for entry in payload["filters"]] == list(range(1, 9))
    for entry in payload["filters"]:
        assert isinstance(entry["sigma_x"], float) and isinstance(entry["sigma_y"], float)
        assert (entry["alpha"] is not None) == (entry["index"] == 7)
    frame = fit_published_filters("B").to_frame()
    assert list(frame["index"]) == list(range(1, 9))


# --- templates and affine assignment --------------------------------------------------------------


def test_templates_are_the_fitted_models(published):
    templates = idealized_templates("B")
    assert templates.shape == (8, 7, 7)
    expected = idealized_filter(5, 1.1066640009337496, 0.944777139036421)
    np.testing.assert_allclose(templates[4], expected, atol=1e-5)
    assert idealized_templates("D2", size=9).shape == (8, 9, 9)
    experiment = idealized_templates("B", filter7_form="gaussian", sum_to_one=True)
    assert experiment[7].sum() == pytest.approx(1.0)
    # Each published filter is assigned to its own model, with the method-B cosines.
    fit = affine_fit_to_templates(published, templates)
    np.testing.assert_array_equal(fit.assignment, np.arange(8))
    np.testing.assert_allclose(fit.cosine, [f.cosine_similarity for f in fit_published_filters("B").filters])


def test_affine_assignment_recovers_planted_templates():
    rng = np.random.default_rng(7)
    templates = idealized_templates("B")
    planted = rng.integers(0, 8, size=500)
    amplitude = rng.choice([-1.0, 1.0], size=500) * rng.uniform(0.1, 5.0, size=500)
    offset = rng.normal(0.0, 0.3, size=500)
    units = templates - templates.mean(axis=(1, 2), keepdims=True)
    units /= np.linalg.norm(units.reshape(8, -1), axis=1)[:, None, None]
    clean = amplitude[:, None, None] * units[planted] + offset[:, None, None]
    fit = affine_fit_to_templates(clean, templates)
    np.testing.assert_array_equal(fit.assignment, planted)
    np.testing.assert_allclose(fit.amplitude, amplitude, rtol=1e-10)
    np.testing.assert_allclose(fit.offset, offset, atol=1e-12)
    np.testing.assert_allclose(np.abs(fit.cosine), 1.0)
    np.testing.assert_allclose(fit.replaced(templates), clean, atol=1e-12)
    noisy = clean + 0.02 * np.abs(amplitude)[:, None, None] * rng.standard_normal(clean.shape)
    noisy_fit = affine_fit_to_templates(noisy, templates)
    np.testing.assert_array_equal(noisy_fit.assignment, planted)
    np.testing.assert_array_equal(np.sign(noisy_fit.amplitude), np.sign(amplitude))


def test_affine_assignment_of_constant_filters_is_finite():
    fit = affine_fit_to_templates(np.full((2, 7, 7), 0.3), idealized_templates("B"))
    np.testing.assert_allclose(fit.cosine, [0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(fit.offset, 0.3)
    with pytest.raises(ValueError, match="must be"):
        affine_fit_to_templates(np.zeros((2, 5, 5)), idealized_templates("B"))


def test_a_fits_models_are_its_idealized_filters_at_the_fitted_sigmas():
    fit = fit_published_filters("D1")
    models = fit.models(9)
    assert models.shape == (8, 9, 9)
    for model, f in zip(models, fit.filters):
        np.testing.assert_array_equal(model, idealized_filter(f.index, f.sigma_x, f.sigma_y, f.alpha, 9))
