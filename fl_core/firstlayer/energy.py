"""Energy profiles of convolution filters and the linear-systems theory (Chowers & Weiss, ICML 2023).

* Energy profile (Def. 2.2): e_i = sqrt( (1/K) Σ_k (w_kᵀ u_i)² ), u_i the patch PCA components by decreasing λ;
  reported max-normalized (a Pearson comparison ignores the scale).
* Profile comparison: Pearson correlation of the linear profiles (authors' code, ``np.corrcoef``).
* Theory (Thm. 4.2, η→0 form of eq. 3): e_i ∝ λ_i · (1 − (1 − ηλ_i²)^t)/(ηλ_i²) → (1 − exp(−τλ_i²))/λ_i with
  τ = ηt: ∝ λ_i early (follows the PCA spectrum), ∝ 1/λ_i late (whitening). One free parameter τ ("eta_t"), fitted
  by maximizing Pearson r, as in the paper's §5. Pearson r is offset- and scale-free, so the curve it vouches for
  is the least-squares affine map a + b·θ of the theory onto the profile (drawn as the fit), and r on linear values
  is dominated by the first few components; ``r_log`` (Pearson r of the log values) is reported beside it.
* Random-init baseline: banks drawn with PyTorch's default convolution init (kaiming-uniform, a = √5) over seeds.
  Any i.i.d. init with equal variance per weight has a flat expected profile, so the init family does not matter
  for a Pearson comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_model, as_models, as_settings
from fl_core.compute.budgets import SCALED_BATCH, check_patch_statistics, check_random_banks
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import Progress, ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import AnalysisError
from fl_core.firstlayer.patches import PatchPCA, patch_pca
from fl_core.firstlayer.settings import EnergyOverrides, EnergySettings
from fl_core.io.images import ImageSet, iter_input_batches, iter_scaled_inputs
from fl_core.io.layers import ConvLayer, check_layer, iter_layer_inputs, layer_weight
from fl_core.io.models import LoadedModel
from fl_core.results import Result

if TYPE_CHECKING:
    from typing_extensions import Unpack


def energy_profile(weight: torch.Tensor | np.ndarray, pca: PatchPCA, init: torch.Tensor | np.ndarray | None = None,
                   normalize: bool = True, name: str = "the bank") -> np.ndarray:
    """e_i = sqrt(mean_k (w_kᵀu_i)²) of a filter bank (K, C, kh, kw) or (K, D); optionally of ``weight − init``.

    Args:
        weight: the filters.
        pca: patch PCA of the same input space and patch size.
        init: initial filters to subtract (the authors' ``subtract_init``).
        normalize: divide by the maximum (the authors' convention).
        name: what the filters are, for error messages ("layer conv1 of resnet18").

    Raises:
        AnalysisError: the filters (after subtracting ``init``) are all zero or not finite: every e_i is then 0 or
            NaN, and the profile, its theory fit and its correlations are undefined.
    """
    w = np.asarray(weight, dtype=np.float64).reshape(len(weight), -1)
    if init is not None:
        w = w - np.asarray(init, dtype=np.float64).reshape(w.shape)
    if w.shape[1] != pca.dim:
        raise AnalysisError(f"filters of dimension {w.shape[1]} cannot be projected on {pca.dim}-D patch components")
    _require_usable_filters(w, name, subtracted=init is not None)
    profile = np.sqrt(np.mean((w @ pca.components.T) ** 2, axis=0))
    return profile / profile.max() if normalize else profile


def _require_usable_filters(w: np.ndarray, name: str, subtracted: bool) -> None:
    if not np.isfinite(w).all():
        raise AnalysisError(f"The filters of {name} contain NaN or infinite values, so their energy profile is "
                            "undefined. Use a checkpoint from before the training run diverged.")
    if not np.abs(w).max() > 0:
        if subtracted:
            raise AnalysisError(f"The filters of {name} equal the initialization subtracted from them (the "
                                "difference is all zero), so there is no learned change to profile. Analyse the "
                                "model without subtracting its initialization.")
        raise AnalysisError(f"The filters of {name} are all zero, so their energy profile (and its fit to the "
                            "theory) is undefined. Check that the checkpoint holds the trained weights of this "
                            "layer, or pick another layer.")


def _require_varying_profile(profile: np.ndarray, lambdas: np.ndarray) -> None:
    """A Pearson correlation with the theory needs a finite profile that varies, of the patch PCA's length."""
    profile = np.asarray(profile, dtype=np.float64)
    if profile.shape != np.shape(lambdas):
        raise AnalysisError(f"a profile of {profile.size} components cannot be compared with {np.size(lambdas)} "
                            "patch components (a different patch size or input space)")
    if not np.isfinite(profile).all() or profile.size < 2 or np.ptp(profile) == 0:
        raise AnalysisError(f"The energy profile is the same for all {profile.size} patch components (or not "
                            "finite), so its correlation with the linear theory is undefined. Pick another layer.")


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two profiles (NaN when either is constant or the lengths differ)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def correlation_matrix(profiles: Sequence[np.ndarray]) -> np.ndarray:
    """Pairwise Pearson correlations; NaN where two profiles have different dimensions (different patch sizes)."""
    n = len(profiles)
    out = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = pearson(profiles[i], profiles[j])
    return out


def theory_profile(lambdas: np.ndarray, eta_t: float, normalize: bool = True) -> np.ndarray:
    """Closed-form profile of a linear CNN after GD time τ = ηt: e_i ∝ (1 − exp(−τλ_i²)) / λ_i.

    This is the η → 0 limit of λ_i(1 − (1 − ηλ_i²)^t)/(ηλ_i²) (eq. 3 with the η² typo read as η), which the
    authors evaluate with η = 1e-7 (so ηλ² ≪ 1, where the two agree).
    """
    lam = np.asarray(lambdas, dtype=np.float64)
    safe = np.where(lam > 0, lam, np.finfo(float).tiny)
    profile = -np.expm1(-eta_t * safe**2) / safe
    profile = np.where(lam > 0, profile, eta_t * lam)
    return profile / profile.max() if normalize and profile.max() > 0 else profile


@dataclass(frozen=True)
class AffineMap(Result):
    """``a + b · x``: the least-squares map of the theory's shape onto a profile."""

    a: float
    b: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.a + self.b * np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class TheoryFit(Result):
    """The one-parameter fit of :func:`theory_profile` to a profile, and how well it agrees.

    Attributes:
        eta_t: τ = ηt maximizing Pearson r (the paper's §5 fit).
        r: Pearson r of the profile and the theory θ_i at τ, on linear values (the paper's measure). It is
            scale- and offset-free, so it says how well the best *affine* map of θ describes the profile; with λ
            falling steeply, a few first components carry most of the linear variance and dominate it.
        r_log: Pearson r of log e_i and log θ_i at the same τ (components with e_i > 0; NaN with fewer than 3):
            the agreement on the log plot's values, where every component counts alike (*proposed*: the paper
            reports r only).
        affine: least-squares ``a + b · θ`` onto the profile: b = cov(e, θ)/var(θ), a = mean(e) − b·mean(θ), so
            r² = 1 − SSE/SST of exactly this map.
        profile: the fitted curve ``a + b · θ`` (what r measures, and what is drawn).
        shape: θ at τ, max-normalized.
    """

    eta_t: float
    r: float
    r_log: float
    affine: AffineMap
    profile: np.ndarray
    shape: np.ndarray

    _private_fields = ("profile", "shape")


def affine_fit(profile: np.ndarray, shape: np.ndarray) -> AffineMap:
    """Ordinary least squares of ``profile`` on ``shape``: b = cov/var, a = mean(e) − b·mean(θ)."""
    e, x = np.asarray(profile, dtype=np.float64), np.asarray(shape, dtype=np.float64)
    dx = x - x.mean()
    b = float(dx @ (e - e.mean()) / (dx @ dx))
    return AffineMap(a=float(e.mean() - b * x.mean()), b=b)


def log_pearson(profile: np.ndarray, shape: np.ndarray) -> float:
    """Pearson r of log e_i and log θ_i over the components where both are positive (NaN with fewer than 3)."""
    e, x = np.asarray(profile, dtype=np.float64), np.asarray(shape, dtype=np.float64)
    keep = (e > 0) & (x > 0)
    return pearson(np.log(e[keep]), np.log(x[keep])) if keep.sum() >= 3 else float("nan")


def fit_linear_theory(profile: np.ndarray, lambdas: np.ndarray, n_grid: int = 241) -> TheoryFit:
    """Grid search of log τ over [1e-3, 1e5]/λ₁² (both regimes), then golden-section refinement around the best.

    Returns the τ of largest Pearson r between ``profile`` and :func:`theory_profile`, the affine map that r
    implies (:func:`affine_fit`) and the log-value agreement (:func:`log_pearson`).

    Raises:
        AnalysisError: the profile is flat, not finite or of another length than ``lambdas``, or no τ gives a
            defined r (all λ equal): r would be NaN.
    """
    _require_varying_profile(profile, lambdas)
    lam = np.asarray(lambdas, dtype=np.float64)
    scale = 1.0 / max(lam[0] ** 2, np.finfo(float).tiny)
    grid = np.linspace(math.log(1e-3 * scale), math.log(1e5 * scale), n_grid)
    scores = np.nan_to_num(_grid_scores(profile, lam, np.exp(grid)), nan=-2.0)
    best = int(np.argmax(scores))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, n_grid - 1)]
    log_tau = _golden_max(lambda g: pearson(profile, theory_profile(lam, math.exp(g))), lo, hi)
    if not pearson(profile, theory_profile(lam, math.exp(log_tau))) >= scores[best]:  # NaN-safe
        log_tau = grid[best]
    tau = math.exp(log_tau)
    shape = theory_profile(lam, tau)
    r = pearson(profile, shape)
    if not math.isfinite(r):
        raise AnalysisError("The linear theory gives the same profile for every τ (all patch components have the "
                            "same variance), so it cannot be fitted. Pick images with more structure.")
    affine = affine_fit(profile, shape)
    return TheoryFit(eta_t=tau, r=r, r_log=log_pearson(profile, shape), affine=affine, profile=affine(shape),
                     shape=shape)


def _grid_scores(profile: np.ndarray, lam: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Pearson r between ``profile`` and :func:`theory_profile` at every τ of ``taus``, in one matrix product."""
    a = np.asarray(profile, dtype=np.float64)
    if a.shape != lam.shape:
        return np.full(len(taus), np.nan)
    safe = np.where(lam > 0, lam, np.finfo(float).tiny)
    rows = np.where(lam > 0, -np.expm1(-taus[:, None] * safe**2) / safe, taus[:, None] * lam)
    a, rows = a - a.mean(), rows - rows.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = rows @ a / (np.linalg.norm(rows, axis=1) * np.linalg.norm(a))
    return np.where(np.isfinite(r), r, np.nan)


def _golden_max(func, lo: float, hi: float, iterations: int = 40) -> float:
    ratio = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = func(c), func(d)
    for _ in range(iterations):
        if fc > fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = func(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = func(d)
    return (a + b) / 2


def random_init_banks(shape: tuple[int, ...], seeds: Sequence[int]) -> list[torch.Tensor]:
    """Filter banks of ``shape`` with PyTorch's default conv init (kaiming-uniform, a = √5), one per seed."""
    banks = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(int(seed))
        bank = torch.empty(shape)
        fan_in = int(np.prod(shape[1:]))
        bound = 1.0 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        bank.uniform_(-bound, bound, generator=generator)
        banks.append(bank)
    return banks


@dataclass(frozen=True)
class RandomInitBaseline(Result):
    """How random-init banks of the same shape score (mean ± sd over seeds).

    Attributes:
        mean, sd: Pearson r of the linear-theory fit to each random bank's profile (fitted like the model's),
            the paper's Table 3 "random init" row.
        vs_profile_mean, vs_profile_sd: Pearson r between random-init profiles and this model's profile
            (the "trained vs init" comparison of Table 1 with fresh seeds).
        seeds: the seeds used.
        profile_mean, profile_sd: the random-init profiles' mean and sd per component (for the plot band).
    """

    mean: float
    sd: float
    vs_profile_mean: float
    vs_profile_sd: float
    seeds: tuple[int, ...]
    profile_mean: np.ndarray
    profile_sd: np.ndarray


def random_init_baseline(shape: tuple[int, ...], pca: PatchPCA, profile: np.ndarray,
                         seeds: Sequence[int]) -> RandomInitBaseline:
    """Profiles of random-init banks, their theory-fit r and their correlation with ``profile``.

    Raises:
        AnalysisError: ``profile`` is flat or not finite (its correlations would be NaN).
    """
    _require_varying_profile(profile, pca.lambdas)
    profiles = np.stack([energy_profile(bank, pca) for bank in random_init_banks(shape, seeds)])
    fits = np.array([fit_linear_theory(p, pca.lambdas).r for p in profiles])
    vs = np.array([pearson(p, profile) for p in profiles])
    return RandomInitBaseline(mean=float(fits.mean()), sd=float(fits.std()), vs_profile_mean=float(vs.mean()),
                              vs_profile_sd=float(vs.std()), seeds=tuple(int(s) for s in seeds),
                              profile_mean=profiles.mean(0), profile_sd=profiles.std(0))


@dataclass(frozen=True)
class ModelEnergy(Result):
    """The energy profile of one model's layer and how it compares with theory and random init.

    Attributes:
        spec, label: the model.
        layer: the layer analysed; ``beyond_paper`` is True for layers other than the first (an extension:
            the patches are that layer's inputs).
        profile: max-normalized e_i in the order of ``lambdas``.
        lambdas: patch std per component of this model's input space.
        theory: the fitted linear theory (``eta_t``, ``r``, ``r_log``, ``affine``: :class:`TheoryFit`).
        random_init: the random-init baseline.
        init_subtracted: spec of the initialization subtracted from the weights, if any.
        n_filters: K.
        filters: the (K, C, kh, kw) filters analysed (after init subtraction), for tiles.
        pca_key: identifies the patch PCA used (models sharing it are directly comparable).
    """

    spec: str
    label: str
    layer: str
    beyond_paper: bool
    profile: np.ndarray
    lambdas: np.ndarray
    theory: TheoryFit
    random_init: RandomInitBaseline
    init_subtracted: str | None
    n_filters: int
    filters: np.ndarray
    pca_key: str

    _private_fields = ("filters",)

    _figures: ClassVar[dict[str, str]] = {"filters": "fl_core.firstlayer.plots:filters_figure"}

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["random_init"] = {k: v for k, v in out["random_init"].items() if not k.startswith("profile_")}
        return out


@dataclass(frozen=True)
class EnergyResult(Result):
    """Energy profiles of several models, their correlations, and the patch PCA they were measured in.

    Attributes:
        lambdas: λ of the first model's input space (``models[i].lambdas`` holds each model's own).
        models: one :class:`ModelEnergy` per model.
        correlation: Pearson matrix between the models' profiles (NaN where patch dimensions differ).
        images: description of the image source.
        n_patches: patches in the first model's PCA.
        pcas: the patch PCAs by ``pca_key`` (components as images for tiles).
    """

    lambdas: np.ndarray
    models: tuple[ModelEnergy, ...]
    correlation: np.ndarray
    images: str
    n_patches: int
    pcas: dict[str, PatchPCA]

    _private_fields = ("pcas",)

    _figures: ClassVar[dict[str, str]] = {
        "profile": "fl_core.firstlayer.plots:profile_figure",
        "spectrum": "fl_core.firstlayer.plots:spectrum_figure",
        "correlation": "fl_core.firstlayer.plots:correlation_figure",
        "components": "fl_core.firstlayer.plots:components_figure",
    }

    def to_frame(self) -> pd.DataFrame:
        """Long table: one row per (model, component) with the model's label and spec, λ, e_i, the theory θ_i
        (max-normalized), the fitted curve a + b·θ_i and the random-init band."""
        rows = []
        for m in self.models:
            for i, (lam, e, t, fit) in enumerate(zip(m.lambdas, m.profile, m.theory.shape, m.theory.profile),
                                                 start=1):
                rows.append({"model": m.label, "spec": m.spec, "layer": m.layer, "component": i, "lambda": lam,
                             "profile": e, "theory": t, "theory_fit": fit,
                             "random_init_mean": m.random_init.profile_mean[i - 1],
                             "random_init_sd": m.random_init.profile_sd[i - 1]})
        return pd.DataFrame(rows)

    def summary_frame(self) -> pd.DataFrame:
        """One row per model: theory fit (r, r on log values, ηt, the affine map), random-init baseline, init
        subtraction."""
        return pd.DataFrame([{
            "model": m.label, "spec": m.spec, "layer": m.layer, "filters": m.n_filters, "theory_r": m.theory.r,
            "theory_r_log": m.theory.r_log, "eta_t": m.theory.eta_t, "theory_a": m.theory.affine.a,
            "theory_b": m.theory.affine.b, "random_init_r_mean": m.random_init.mean,
            "random_init_r_sd": m.random_init.sd,
            "vs_random_init_mean": m.random_init.vs_profile_mean, "vs_random_init_sd": m.random_init.vs_profile_sd,
            "init_subtracted": m.init_subtracted or "", "beyond_paper": m.beyond_paper} for m in self.models])

    def correlation_frame(self) -> pd.DataFrame:
        labels = [m.spec for m in self.models]
        return pd.DataFrame(self.correlation, index=labels, columns=labels)


def layer_patch_pca(loaded: LoadedModel, layer: ConvLayer, images: ImageSet, *, device=None,
                    progress: Progress | None = None) -> PatchPCA:
    """Patch PCA in the input space of ``layer``.

    First layer: every k×k patch of every image at the model's scale (:func:`~fl_core.io.images.scaled_input`).
    Deeper layers (beyond the paper): the layer's inputs captured by a hook on centre-cropped model input.
    """
    device = resolve_device(device)
    if layer.kind == "first" or loaded.model is None:
        batches = iter_scaled_inputs(images, loaded.input_config)
        return patch_pca(batches, layer.kernel_size, device=device, total=len(images), progress=progress)
    model = loaded.forward_copy(device)
    batches = (x for x, _ in iter_input_batches(images, loaded.input_config, batch_size=SCALED_BATCH))
    inputs = iter_layer_inputs(model, layer.name, batches, device)
    return patch_pca(inputs, layer.kernel_size, device=device, groups=layer.groups,
                     total=math.ceil(len(images) / 8), progress=progress)


def patch_geometry(loaded: LoadedModel, layer: ConvLayer) -> tuple[int, tuple[int, int], int, int]:
    """``(channels, kernel, side, samples)`` of the patches :func:`layer_patch_pca` takes for ``layer``: first layers
    (and weights-only files) see RGB patches of the image at the model's scale (side: the resize edge); deeper layers
    their input, about output side × stride at the model's input size, its channel groups pooled as samples."""
    cfg = loaded.input_config
    if layer.kind == "first" or loaded.model is None or layer.output_size is None:
        return 3, layer.kernel_size, cfg.resize_size, 1
    side = layer.output_size * layer.stride[0] * cfg.input_size // min(cfg.input_size, 224)
    return layer.in_channels // layer.groups, layer.kernel_size, max(side, 1), layer.groups


def check_energy_budget(loaded: LoadedModel, layer: ConvLayer, seeds: int) -> None:
    """Refuse, before any image is read, a layer whose patch statistics (:func:`patch_geometry`) or random-init
    baseline would exceed the analysis budget (:mod:`fl_core.compute.budgets`)."""
    channels, kernel, side, samples = patch_geometry(loaded, layer)
    what = f"layer {layer.name} of {loaded.label}"
    check_patch_statistics(channels, kernel, side, samples=samples, what=what)
    check_random_banks(seeds, layer.out_channels, layer.patch_dim, what=what)


def pca_key(loaded: LoadedModel, layer: ConvLayer) -> str:
    """Models with the same key share a patch PCA: first layers in the same input space and patch size."""
    cfg = loaded.input_config
    if layer.kind == "first" or loaded.model is None:
        return f"input {cfg.input_size}/{cfg.crop_pct:g} {cfg.crop_mode} {cfg.interpolation} mean={cfg.mean} " \
               f"std={cfg.std} " \
               f"k={layer.kernel_size} c={layer.in_channels}"
    return f"{loaded.spec}::{layer.name}"


def model_energy(loaded: LoadedModel, layer: ConvLayer, pca: PatchPCA, *, seeds: Sequence[int],
                 init: LoadedModel | None = None, key: str = "") -> ModelEnergy:
    """Profile, theory fit and random-init baseline of one layer of one model."""
    weight = layer_weight(loaded, layer)
    init_weight = None
    if init is not None:
        init_weight = init.state_dict[layer.weight_key].detach().float().cpu()
        if init_weight.shape != weight.shape:
            raise AnalysisError(f"{init.label} does not match {loaded.label} at {layer.name}: cannot subtract it.")
    filters = (weight - init_weight if init_weight is not None else weight).numpy()
    profile = energy_profile(weight.numpy(), pca, init=None if init_weight is None else init_weight.numpy(),
                             name=f"layer {layer.name} of {loaded.label}")
    return ModelEnergy(spec=loaded.spec, label=loaded.label, layer=layer.name, beyond_paper=layer.kind != "first",
                       profile=profile, lambdas=pca.lambdas, theory=fit_linear_theory(profile, pca.lambdas),
                       random_init=random_init_baseline(tuple(weight.shape), pca, profile, seeds),
                       init_subtracted=init.spec if init is not None else None, n_filters=int(weight.shape[0]),
                       filters=filters, pca_key=key)


def analyze_energy(models: ModelLike | Sequence[ModelLike], data: ImagesLike | None = None,
                   settings: EnergySettings | None = None, *, inits: Mapping[str, ModelLike] | None = None,
                   device: DeviceLike = None, progress: ProgressLike = None,
                   **setting_overrides: Unpack[EnergyOverrides]) -> EnergyResult:
    """Energy profiles of ``settings.layer`` (default: the first convolution) for each model, compared.

    Args:
        models: one model or several (spec strings, loaded models or ``nn.Module`` objects; full or
            weights-only).
        data: the image source of the patch statistics (default: the bundled photos).
        settings: the layer and the random-init seeds; ``setting_overrides`` (``layer=``, ``seeds=``) replace fields.
        **setting_overrides: fields of ``settings`` to replace, by name.
        inits: spec -> initialization checkpoint to subtract from that model's weights.
        device: where the patch statistics run.
        progress: ``progress(fraction, message)``.
    """
    settings = as_settings(EnergySettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    images = as_images(data)  # a missing folder is refused before any model loads
    models = as_models(models, progress=progress)
    layers = [check_layer(loaded, settings.layer) for loaded in models]
    inits = {spec: as_model(init, f"inits[{spec!r}]") for spec, init in (inits or {}).items()}
    for loaded, lay in zip(models, layers):
        check_energy_budget(loaded, lay, settings.seeds)
    pcas: dict[str, PatchPCA] = {}
    results = []
    for i, (loaded, lay) in enumerate(zip(models, layers)):
        step = sub_progress(progress, i / len(models), (i + 1) / len(models))
        key = pca_key(loaded, lay)
        if key not in pcas:
            pcas[key] = layer_patch_pca(loaded, lay, images, device=device, progress=sub_progress(step, 0, 0.8))
        report(step, 0.9, f"profile of {loaded.label}")
        results.append(model_energy(loaded, lay, pcas[key], seeds=range(settings.seeds), init=inits.get(loaded.spec),
                                    key=key))
    report(progress, 1.0, "done")
    first = pcas[results[0].pca_key]
    return EnergyResult(lambdas=first.lambdas, models=tuple(results),
                        correlation=correlation_matrix([m.profile for m in results]), images=images.description,
                        n_patches=first.n_patches, pcas=pcas)

