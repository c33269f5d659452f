"""Whitening: the spatial autocorrelation of a filter bank's linear responses (Chowers & Weiss §5, Fig. 6).

C(δ) = Σ_k E_p[ y_k(p) y_k(p+δ) ], y_k = x ⋆ w_k the linear (pre-bias) response; reported as C(δ)/C(0) for
δ = 0..D pixels, averaged over horizontal and vertical shifts, with channel means removed (the paper leaves these
choices open; they are documented in the reference, section 3).

Computation: for a stationary input, E[y_k(p) y_k(p+δ)] = Σ_{c,c',s} A_{cc'}(s) R_{cc'}(δ+s), with
R_{cc'}(Δ) = E[x_c(p) x_{c'}(p+Δ)] the input's cross-correlation (streamed once over the images by FFT) and
A_{cc'}(s) = Σ_k Σ_a w_k[c,a] w_k[c',a+s] the bank's own autocorrelation. One pass over the data then serves
every bank: the model's, ≥ 10 random-init seeds, the ideal ZCA bank and RGB itself (the identity bank).
Responses use stride 1, so δ is in input pixels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from PIL import Image

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_models, as_settings
from fl_core.compute.budgets import check_activation_maps, check_patch_statistics, check_random_banks, check_whitening
from fl_core.compute.device import DeviceLike, resolve_device, statistics_dtype
from fl_core.compute.progress import Progress, ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import AnalysisError
from fl_core.firstlayer.energy import random_init_banks
from fl_core.firstlayer.patches import PatchPCA, patch_pca
from fl_core.firstlayer.settings import WhiteningOverrides, WhiteningSettings
from fl_core.io.images import iter_scaled_inputs, scaled_input, to_display
from fl_core.io.layers import ConvLayer, find_layer, layer_weight
from fl_core.io.models import LoadedModel
from fl_core.io.preprocessing import InputConfig
from fl_core.results import Result

if TYPE_CHECKING:
    from typing_extensions import Unpack


class InputAutocorrelation:
    """Streaming estimate of R_{cc'}(Δ) = E[x_c(p) x_{c'}(p+Δ)] for |Δy|, |Δx| ≤ max_lag, and the channel means.

    Each image contributes Σ_p x_c(p) x_{c'}(p+Δ) over the pixel pairs it contains (FFT with zero padding);
    the sums are divided by the number of such pairs.
    """

    def __init__(self, max_lag: int, device=None) -> None:
        self.max_lag = int(max_lag)
        self.device = resolve_device(device)
        self.dtype = statistics_dtype(self.device)
        self._products: torch.Tensor | None = None
        self._pairs = torch.zeros(2 * self.max_lag + 1, 2 * self.max_lag + 1, dtype=torch.float64)
        self._channel_sum: torch.Tensor | None = None
        self._pixels = 0

    def update(self, x: torch.Tensor) -> None:
        """Add a (N, C, H, W) batch."""
        m = self.max_lag
        for image in x.to(self.device, self.dtype):
            c, h, w = image.shape
            if h <= m or w <= m:
                raise AnalysisError(f"images of {h}×{w} pixels are too small for distances up to {m} pixels")
            spectrum = torch.fft.rfft2(image, s=(h + m, w + m))
            cross = torch.fft.irfft2(spectrum.unsqueeze(1).conj() * spectrum.unsqueeze(0), s=(h + m, w + m))
            lags = torch.arange(-m, m + 1, device=self.device)
            window = cross[:, :, lags % (h + m)][:, :, :, lags % (w + m)]  # [c, c', Δy, Δx]: Σ x_c(p) x_c'(p+Δ)
            if self._products is None:
                self._products = torch.zeros_like(window)
                self._channel_sum = torch.zeros(c, device=self.device, dtype=self.dtype)
            self._products += window
            lag = torch.arange(-m, m + 1, dtype=torch.float64).abs()
            self._pairs += torch.outer(h - lag, w - lag)
            self._channel_sum += image.sum(dim=(1, 2))
            self._pixels += h * w

    def correlation(self) -> torch.Tensor:
        """Centred R_{cc'}(Δ) − μ_c μ_{c'} as (C, C, 2M+1, 2M+1) float64 on CPU."""
        if self._products is None:
            raise AnalysisError("No images were accumulated.")
        mean = (self._channel_sum / self._pixels).double().cpu()
        raw = self._products.double().cpu() / self._pairs
        return raw - torch.outer(mean, mean)[:, :, None, None]


def bank_autocorrelation(weight: torch.Tensor, correlation: torch.Tensor, max_distance: int,
                         name: str = "the bank") -> np.ndarray:
    """C(δ)/C(0) for δ = 0..max_distance of the linear responses of ``weight`` (K, C, kh, kw).

    Uses C(δ) = Σ_{c,c',s} A_{cc'}(s) R_{cc'}(δ+s), averaging horizontal and vertical δ.

    Raises:
        AnalysisError: the filters (``name`` in the message) are all zero or not finite, or the input does not vary:
            C(0) = 0 and C(δ)/C(0) would be NaN.
    """
    w = weight.detach().double().cpu()
    if not torch.isfinite(w).all():
        raise AnalysisError(f"The filters of {name} contain NaN or infinite values, so their responses' "
                            "autocorrelation is undefined. Use a checkpoint from before the training run diverged.")
    if not w.abs().max() > 0:
        raise AnalysisError(f"The filters of {name} are all zero, so their responses are zero and C(δ)/C(0) is "
                            "undefined. Check that the checkpoint holds the trained weights of this layer.")
    _, c, kh, kw = w.shape
    m = (correlation.shape[-1] - 1) // 2
    if correlation.shape[0] != c:
        raise AnalysisError(f"filters with {c} input channels on a {correlation.shape[0]}-channel input")
    if max_distance + max(kh, kw) - 1 > m:
        raise AnalysisError("the input correlation window is too small for this distance and kernel size")
    per_channel = w.transpose(0, 1)  # (C, K, kh, kw)
    auto = F.conv2d(per_channel, per_channel, padding=(kh - 1, kw - 1)).transpose(0, 1)  # A[c, c', s]
    sy, sx = kh - 1, kw - 1
    curve = np.empty(max_distance + 1)
    for d in range(max_distance + 1):
        horizontal = correlation[:, :, m - sy: m + sy + 1, m + d - sx: m + d + sx + 1]
        vertical = correlation[:, :, m + d - sy: m + d + sy + 1, m - sx: m + sx + 1]
        curve[d] = float((auto * (horizontal + vertical)).sum() / 2)
    if not curve[0] > 0:
        raise AnalysisError("The images do not vary (flat colour), so the responses have no energy and C(δ)/C(0) is "
                            "undefined: pick images with texture.")
    return curve / curve[0]


def zca_bank(pca: PatchPCA, eps: float = 1e-8) -> torch.Tensor:
    """The ideal whitening bank W = U Λ⁻¹ Uᵀ (ZCA), one filter per patch dimension: (D, C, kh, kw).

    Any bank with WᵀW = Σ⁻¹ has the same C(δ); this one has energy profile e_i ∝ 1/λ_i (the late-training limit).
    """
    u = torch.from_numpy(pca.components)
    inv = 1.0 / np.maximum(pca.lambdas, eps * pca.lambdas.max())
    matrix = u.T @ torch.diag(torch.from_numpy(inv)) @ u
    return matrix.reshape(pca.dim, *pca.kernel)


def identity_bank(channels: int) -> torch.Tensor:
    """The bank whose responses are the input channels themselves (1×1 identity): C(δ) of RGB."""
    return torch.eye(channels, dtype=torch.float64).reshape(channels, channels, 1, 1)


def linear_responses(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """y_k = x ⋆ w_k: stride-1, unpadded, bias-free responses of a (1, C, H, W) image -> (K, H', W')."""
    return F.conv2d(x.float(), weight.float()).squeeze(0)


@dataclass(frozen=True)
class ActivationMaps(Result):
    """A model's first-layer linear responses to one image.

    Attributes:
        label: the model.
        layer: the first convolution.
        image: the input at the model's scale, as displayed: (H, W, 3) uint8.
        maps: y_k = x ⋆ w_k (:func:`linear_responses`), (K, H', W').
    """

    label: str
    layer: str
    image: np.ndarray
    maps: np.ndarray


def activation_maps(loaded: LoadedModel, image: Image.Image, name: str | None = None, count: int | None = None
                    ) -> ActivationMaps:
    """The first convolution's linear responses to ``image`` (named ``name`` in errors) at the model's scale
    (:func:`~fl_core.io.images.scaled_input`, uncropped): of its first ``count`` filters (all: ``None``), within the
    analysis budget (:func:`~fl_core.compute.budgets.check_activation_maps`)."""
    layer = find_layer(loaded, None)
    weight = layer_weight(loaded, layer)[:count]
    x = scaled_input(image, loaded.input_config, name).unsqueeze(0)
    height, width = (max(side - k + 1, 0) for side, k in zip(x.shape[-2:], layer.kernel_size))
    check_activation_maps(len(weight), layer.patch_dim, height, width, what=f"layer {layer.name} of {loaded.label}")
    return ActivationMaps(label=loaded.label, layer=layer.name, image=to_display(x[0], loaded.input_config),
                          maps=linear_responses(weight, x).numpy())


REFERENCE_NAMES = {"rgb": "RGB input", "random": "random-init filters", "zca": "ideal ZCA whitening bank"}
MODEL_CURVE = "model"
"""The ``curve`` of a model's first-layer rows in :meth:`WhiteningResult.to_frame` (its spec is in ``spec``)."""
"""The reference curves of :class:`WhiteningResult`, by key, as tables and legends name them."""


@dataclass(frozen=True)
class WhiteningResult(Result):
    """Normalized spatial autocorrelation curves.

    Attributes:
        distances: δ in pixels (0..D).
        curves: name -> C(δ)/C(0); ``rgb``, ``zca``, ``random`` (mean over seeds) in the first model's input
            space, and one per model spec (its learned first layer, in its own input space).
        curves_sd: name -> sd over seeds (``random``).
        labels: model spec -> display label.
        seeds: seeds of the random-init banks.
        images: description of the image source.
    """

    distances: np.ndarray
    curves: dict[str, np.ndarray]
    curves_sd: dict[str, np.ndarray]
    labels: dict[str, str]
    seeds: tuple[int, ...]
    images: str

    _figures: ClassVar[dict[str, str]] = {"autocorrelation": "fl_core.firstlayer.plots:autocorrelation_figure"}

    def to_frame(self) -> pd.DataFrame:
        """Long table: one row per (curve, δ) with ``model`` (a model's label, or the reference curve's name),
        ``spec`` (empty for references), ``curve`` (``model`` for a model's first layer, else the reference:
        ``rgb``, ``zca``, ``random``), ``distance``, ``correlation`` C(δ)/C(0) and ``correlation_sd`` (over seeds,
        random init only)."""
        return pd.concat([pd.DataFrame({
            "model": self.labels.get(name, REFERENCE_NAMES.get(name, name)),
            "spec": name if name in self.labels else "", "curve": MODEL_CURVE if name in self.labels else name,
            "distance": self.distances,
            "correlation": curve, "correlation_sd": self.curves_sd.get(name, np.full(len(curve), np.nan))})
            for name, curve in self.curves.items()], ignore_index=True)

    def at(self, distance: int) -> dict[str, float]:
        """Every curve's value at one distance (the paper quotes δ = 10)."""
        index = int(np.searchsorted(self.distances, distance))
        return {name: float(curve[index]) for name, curve in self.curves.items()}

    def decorrelation(self, distance: int) -> dict[str, float]:
        """How far each model's learned curve lies below RGB at ``distance`` (positive = whitening)."""
        values = self.at(distance)
        return {spec: values["rgb"] - values[spec] for spec in self.labels}


def input_correlation(batches: Iterable[torch.Tensor], max_lag: int, *, device=None, total: int | None = None,
                      progress: Progress | None = None) -> torch.Tensor:
    """Stream image batches into :class:`InputAutocorrelation` and return the centred correlation window."""
    accumulator = InputAutocorrelation(max_lag, device=device)
    for i, batch in enumerate(batches, start=1):
        accumulator.update(batch)
        report(progress, i / total if total else 0.0, f"input autocorrelation: image {i}")
    return accumulator.correlation()


def check_whitening_budget(models: Sequence[LoadedModel], layers: Sequence[ConvLayer],
                           settings: WhiteningSettings) -> None:
    """Refuse, before any image is read, distances the images at a model's scale cannot hold and statistics over the
    analysis budget (:mod:`fl_core.compute.budgets`): each input space's autocorrelation window (up to the largest
    kernel), the reference model's patch PCA (the ZCA bank) and its random-init banks."""
    max_kernel = max((lay.kernel_size for lay in layers), key=max)
    for loaded, lay in zip(models, layers):
        check_whitening(3, max_kernel, settings.max_distance, loaded.input_config.resize_size,
                        what=f"layer {lay.name} of {loaded.label}")
    reference, first = models[0], layers[0]
    what = f"layer {first.name} of {reference.label}"
    check_patch_statistics(3, first.kernel_size, reference.input_config.resize_size, what=what)
    check_random_banks(settings.seeds, first.out_channels, first.patch_dim, what=what)


def analyze_whitening(models: ModelLike | Sequence[ModelLike], data: ImagesLike | None = None,
                      settings: WhiteningSettings | None = None, *, device: DeviceLike = None,
                      progress: ProgressLike = None,
                      **setting_overrides: Unpack[WhiteningOverrides]) -> WhiteningResult:
    """C(δ)/C(0) of RGB, of each model's learned first layer, of random-init banks and of the ideal ZCA bank.

    Args:
        models: one model or several (spec strings, loaded models or ``nn.Module`` objects; full or
            weights-only); their first convolutions are compared.
        data: image source (each image at the model's scale, uncropped; default: the bundled photos).
        settings: the largest δ in pixels and the random-init seeds; ``setting_overrides`` replace fields.
        **setting_overrides: fields of ``settings`` to replace, by name.
        device: where the statistics run.
        progress: ``progress(fraction, message)``.
    """
    settings = as_settings(WhiteningSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    images = as_images(data)  # a missing folder is refused before any model loads
    models = as_models(models, progress=progress)
    max_distance, seeds = settings.max_distance, range(settings.seeds)
    layers = [find_layer(m, None) for m in models]
    check_whitening_budget(models, layers, settings)
    max_kernel = max(max(lay.kernel_size) for lay in layers)
    spaces: dict[InputConfig, torch.Tensor] = {}
    for i, loaded in enumerate(models):
        if loaded.input_config not in spaces:
            step = sub_progress(progress, i / len(models), (i + 0.7) / len(models))
            spaces[loaded.input_config] = input_correlation(
                iter_scaled_inputs(images, loaded.input_config), max_distance + max_kernel - 1, device=device,
                total=len(images), progress=step)
    reference, first_layer = models[0], layers[0]
    correlation = spaces[reference.input_config]
    weight = layer_weight(reference, first_layer)
    report(progress, 0.8, "ideal ZCA bank: patch PCA")
    pca = patch_pca(iter_scaled_inputs(images, reference.input_config), first_layer.kernel_size, device=device)
    random_curves = np.stack([bank_autocorrelation(bank, correlation, max_distance)
                              for bank in random_init_banks(tuple(weight.shape), seeds)])
    curves = {"rgb": bank_autocorrelation(identity_bank(weight.shape[1]), correlation, max_distance),
              "zca": bank_autocorrelation(zca_bank(pca), correlation, max_distance),
              "random": random_curves.mean(0)}
    for loaded, lay in zip(models, layers):
        curves[loaded.spec] = bank_autocorrelation(layer_weight(loaded, lay), spaces[loaded.input_config],
                                                   max_distance, name=f"layer {lay.name} of {loaded.label}")
    report(progress, 1.0, "done")
    return WhiteningResult(distances=np.arange(max_distance + 1), curves=curves,
                           curves_sd={"random": random_curves.std(0)},
                           labels={m.spec: m.label for m in models}, seeds=tuple(int(s) for s in seeds),
                           images=images.description)
