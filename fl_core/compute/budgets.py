"""Budgets: what one analysis may cost, decided from its inputs' shapes before anything is allocated.

A file small on disk can describe a computation far beyond any real network of its size (a first convolution with a
101×101 kernel has a 30,603-dimensional patch space, whose covariance alone is 7.5 GB). Every analysis entry point
asks the rule of this module for its inputs first; each rule estimates the memory and the multiply-adds from the
shapes and refuses, with what was too large, the limit and what to do, before computing.

The limits (:class:`Budget`, read from the environment on every check, so an admin sets them per server):

* ``FL_ANALYSIS_MEMORY_MB`` (default 1024): the working memory of one analysis step.
* ``FL_ANALYSIS_GMAC_PER_IMAGE`` (default 50): giga multiply-adds one image may cost an analysis (and the one-off
  eigen-decomposition of the patch covariance): about 1-3 s per image on 2 CPU cores. The 11-by-11 first layer of
  AlexNet costs 11 GMAC per 256×256 image, a ViT-B/16 patch embedding 40; a 21×21 kernel 127.
* ``FL_MAX_PARAMS`` (default 250,000,000): parameters of a registry architecture (1 GB in float32), counted on the
  meta device before the network is materialised.
* ``FL_TRAINING_TMAC`` (default 100): trillion multiply-adds one training run may cost, every step's forward and
  backward passes (about 30-60 minutes on 2 CPU cores; the Training Lab's default run costs 1.4).

A training run is checked against three of them (:func:`check_training`): its parameters, the memory of one step and
the work of all its steps.

Preprocessing is bounded when it is chosen (:func:`check_scaled_images`: a link's, the sidebar's or ``--input-size``
with ``--crop-pct``): the images an analysis holds at once at the model's scale must fit the memory budget.

Image decoding is bounded by pixels × progressive scans (:data:`MAX_DECODE_PIXEL_SCANS`): a progressive JPEG
decodes every scan over the whole image, so a 1 MB file of many scans can take minutes.

A checkpoint file is bounded by its size, ``FL_MAX_CHECKPOINT_MB`` (:func:`max_checkpoint_mb`, default 1024), before it
is read (:mod:`fl_core.io.checkpoints`); the dashboard's upload limit follows it by default (:mod:`fl_ui.serve`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from fl_core.errors import AnalysisError, DataError, FilterLensError, ModelSpecError

MEMORY_VARIABLE, WORK_VARIABLE, PARAMS_VARIABLE = "FL_ANALYSIS_MEMORY_MB", "FL_ANALYSIS_GMAC_PER_IMAGE", "FL_MAX_PARAMS"
TRAINING_VARIABLE = "FL_TRAINING_TMAC"
CHECKPOINT_VARIABLE = "FL_MAX_CHECKPOINT_MB"
MAX_CHECKPOINT_MB = 1024
FLOAT64 = 8
FLOAT32 = 4
BACKWARD_WORK = 2
"""Multiply-adds of a backward pass per forward multiply-add (gradients of the inputs and of the weights)."""
PATCH_MATRICES = 5
"""D×D float64 matrices alive at once in patch statistics and their PCA: the accumulated covariance, one band's
product, the eigen-decomposition's input, eigenvectors and workspace (the ZCA bank reuses them)."""
EIGH_WORK = 9
"""Multiply-adds of a symmetric eigen-decomposition per D³ (tridiagonal reduction and back-transformation)."""
CHANNEL_MATRICES = 10
"""C×C float64 matrices the channel statistics hold (co-moments, covariance, correlation, shrunk and inverted copies,
pre- and post-activation)."""
SCALED_BATCH = 8
"""Images an analysis holds at once at the model's scale, at the least (the energy profiles' batch)."""
MAX_DECODE_PIXEL_SCANS = 1_000_000_000
"""Pixels × scans of one image's decoding (a 64-megapixel photo of 15 scans; a usual progressive JPEG has 10 or
fewer): 0.3-2 ns per pixel-scan on one core, so at most about 2 s."""


@dataclass(frozen=True)
class Budget:
    """The limits of one analysis (module docstring).

    Attributes:
        memory_mb: working memory of one analysis step, in MiB.
        gmac_per_image: giga multiply-adds one image may cost.
        max_params: parameters of a registry architecture.
        training_tmac: trillion multiply-adds one training run may cost.
    """

    memory_mb: int = 1024
    gmac_per_image: float = 50.0
    max_params: int = 250_000_000
    training_tmac: float = 100.0

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_mb) << 20

    @property
    def work(self) -> float:
        """Multiply-adds one image may cost."""
        return self.gmac_per_image * 1e9

    @property
    def training_work(self) -> float:
        """Multiply-adds one training run may cost."""
        return self.training_tmac * 1e12


def analysis_budget() -> Budget:
    """The budget set by the environment (:data:`MEMORY_VARIABLE`, :data:`WORK_VARIABLE`, :data:`PARAMS_VARIABLE`,
    :data:`TRAINING_VARIABLE`), defaults for unset variables; a malformed value is refused naming the variable."""
    default = Budget()
    values = {}
    for name, variable, kind in (("memory_mb", MEMORY_VARIABLE, int), ("gmac_per_image", WORK_VARIABLE, float),
                                 ("max_params", PARAMS_VARIABLE, int), ("training_tmac", TRAINING_VARIABLE, float)):
        text = os.environ.get(variable, "").strip().replace("_", "")
        try:
            values[name] = kind(float(text)) if text else getattr(default, name)
        except (ValueError, OverflowError):
            raise FilterLensError(f"{variable}={os.environ[variable]!r} is not a number; set it to a positive number "
                                  f"or unset it (default {getattr(default, name):,}).") from None
        if not values[name] > 0 or not math.isfinite(values[name]):
            raise FilterLensError(f"{variable} must be a positive number, not {os.environ[variable]!r}.")
    return Budget(**values)


def max_checkpoint_mb() -> float:
    """The largest checkpoint file read, in MiB: :data:`CHECKPOINT_VARIABLE`, default :data:`MAX_CHECKPOINT_MB`."""
    return float(os.environ.get(CHECKPOINT_VARIABLE) or MAX_CHECKPOINT_MB)


def _size(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:,.0f} MiB"


def require_memory(what: str, n_bytes: float, advice: str) -> None:
    """Refuse ``what`` when ``n_bytes`` exceed the memory budget; the message says what, the limit and ``advice``."""
    budget = analysis_budget()
    if n_bytes > budget.memory_bytes:
        raise AnalysisError(f"{what} would take about {_size(n_bytes)}, over the {_size(budget.memory_bytes)} an "
                            f"analysis may use ({MEMORY_VARIABLE}); refused before computing. {advice}")


def require_work(what: str, multiply_adds: float, advice: str) -> None:
    """Refuse ``what`` when its ``multiply_adds`` (per image, or one-off) exceed the work budget."""
    budget = analysis_budget()
    if multiply_adds > budget.work:
        raise AnalysisError(f"{what} would cost {multiply_adds / 1e9:,.0f} billion multiply-adds, over the "
                            f"{budget.gmac_per_image:,.0f} billion an image may cost ({WORK_VARIABLE}); refused "
                            f"before computing. {advice}")


# ----------------------------------------------------------------------------------------------- the rules


def check_patch_statistics(channels: int, kernel: tuple[int, int], side: int, *, samples: int = 1,
                           what: str = "the layer") -> None:
    """Patch statistics and PCA of ``channels``×kh×kw patches (D = C·kh·kw) of images ``side`` pixels square at
    the model's scale: the kernel must fit the image; memory :data:`PATCH_MATRICES`·8·D² bytes; per image
    (side − kh + 1)(side − kw + 1)·``samples``·(D + 1)² multiply-adds (``samples``: channel groups pooled), and
    :data:`EIGH_WORK`·D³ once."""
    kh, kw = kernel
    dim = channels * kh * kw
    if max(kh, kw) > side:
        raise AnalysisError(f"{what} has a {kh}×{kw} kernel, larger than the {side}-pixel images it would see at the "
                            "model's scale, so there are no patches to analyse. Raise the input size, or pick a layer "
                            "with a smaller kernel.")
    advice = (f"Its patches have D = {channels}·{kh}·{kw} = {dim:,} dimensions (real first layers: 27 to 768). "
              "Pick a layer with a smaller kernel or fewer input channels, or lower the input size.")
    require_memory(f"The patch covariance of {what}", PATCH_MATRICES * FLOAT64 * dim**2, advice)
    patches = max(side - kh + 1, 1) * max(side - kw + 1, 1) * samples
    require_work(f"The patch statistics of {what} ({patches:,} patches of {dim:,} values per image)",
                 patch_work(channels, kernel, side, samples=samples), advice)
    require_work(f"The patch PCA of {what} (a {dim:,}×{dim:,} eigen-decomposition)", EIGH_WORK * dim**3, advice)


def patch_work(channels: int, kernel: tuple[int, int], side: int, *, samples: int = 1) -> float:
    """Multiply-adds of one image's patch statistics: (side − kh + 1)(side − kw + 1)·``samples`` patches of
    (D + 1)² each (the band product), D = ``channels``·kh·kw."""
    kh, kw = kernel
    return max(side - kh + 1, 1) * max(side - kw + 1, 1) * samples * (channels * kh * kw + 1) ** 2


def check_random_banks(seeds: int, filters: int, dim: int, *, what: str = "the layer") -> None:
    """``seeds`` random-init banks of ``filters``×``dim`` weights (all held at once, float32) and their energy
    profiles (``filters``·D² multiply-adds each)."""
    advice = "Use fewer random-init seeds."
    require_memory(f"{seeds:,} random-init banks of {what} ({filters:,} filters of {dim:,} values)",
                   seeds * filters * dim * FLOAT32, advice)
    require_work(f"Profiling {seeds:,} random-init banks of {what}", seeds * filters * dim**2, advice)


def check_whitening(channels: int, kernel: tuple[int, int], max_distance: int, side: int, *,
                    what: str = "the first layer") -> None:
    """The input's autocorrelation window up to lag m = δ_max + k − 1: m must stay below the image side at the
    model's scale; memory 8·C²·(3(2m+1)² + 2(side+m)²) bytes (window sums, FFT product and its inverse)."""
    lag = max_distance + max(kernel) - 1
    if lag >= side:
        raise AnalysisError(f"Distances up to {max_distance} px with {what}'s {kernel[0]}×{kernel[1]} kernel need "
                            f"images wider than {lag} px at the model's scale, and they are {side} px. Lower the "
                            f"largest distance to at most {max(side - max(kernel), 0)} px, or raise the input size.")
    window = 3 * (2 * lag + 1) ** 2 + 2 * (side + lag) ** 2
    require_memory(f"The autocorrelation of {channels}-channel images up to {lag} px", FLOAT64 * channels**2 * window,
                   "Lower the largest distance.")


def check_activation_maps(filters: int, dim: int, height: int, width: int, *, what: str = "the first layer") -> None:
    """``filters`` response maps of height × width (float32) and the ``filters``·D·height·width multiply-adds of the
    convolution."""
    advice = "Show fewer filters, or lower the input size."
    require_memory(f"{filters:,} response maps of {what} at {height}×{width} px", FLOAT32 * filters * height * width,
                   advice)
    require_work(f"{filters:,} response maps of {what}", filters * dim * height * width, advice)


def check_filter_gram(filters: int, dim: int, *, inverse: bool, what: str = "a layer") -> None:
    """Gram statistics of ``filters`` filters of ``dim`` values: a float64 copy (2·8·K·D bytes: filters and unit
    vectors) and K²·D multiply-adds; with ``inverse`` (the leave-one-out R²) also 3 K×K float64 matrices and K³."""
    memory = 2 * FLOAT64 * filters * dim + (3 * FLOAT64 * filters**2 if inverse else 0)
    work = filters**2 * dim + (filters**3 if inverse else 0)
    advice = "Its duplicate-filter statistics cannot be computed within the budget; leave this layer out."
    require_memory(f"The peer statistics of {filters:,} filters of {dim:,} values in {what}", memory, advice)
    require_work(f"The peer statistics of {filters:,} filters of {dim:,} values in {what}", work, advice)


def check_channel_statistics(channels: int, *, what: str = "the layer") -> None:
    """Channel axes of ``channels`` channels: :data:`CHANNEL_MATRICES` C×C float64 matrices."""
    require_memory(f"The channel statistics of {what} ({channels:,} channels)",
                   CHANNEL_MATRICES * FLOAT64 * channels**2, "Pick a layer with fewer channels.")


def check_clustering(filters: int, dim: int, k: int, restarts: int, iterations: int, *,
                     what: str = "the depthwise filters") -> None:
    """Vectorised k-means of ``filters`` unit vectors of ``dim`` values: (R, N, k) similarities in float64 (three
    alive at once) and R·N·k·D multiply-adds per Lloyd iteration."""
    advice = "Use fewer restarts or clusters."
    require_memory(f"Clustering {filters:,} {what} into {k} clusters {restarts:,} times",
                   3 * FLOAT64 * restarts * filters * k, advice)
    require_work(f"Clustering {filters:,} {what} into {k} clusters {restarts:,} times",
                 restarts * filters * k * dim * iterations, advice)


def check_parameters(count: int, name: str, *, building: bool = False) -> None:
    """A registry architecture of ``count`` parameters (counted on the meta device, or while ``building`` it)."""
    budget = analysis_budget()
    if count > budget.max_params:
        counted = "more than " if building else ""
        raise ModelSpecError(f"{name} has {counted}{count / 1e6:,.0f} million parameters, over the "
                             f"{budget.max_params / 1e6:,.0f} million this server loads ({PARAMS_VARIABLE}); refused "
                             f"{'while' if building else 'before'} building it. Pick a smaller architecture, or ask "
                             "the admin to raise the limit.")


def check_training(parameters: int, activations: int, multiply_adds: float, *, batch: int, steps: int,
                   momentum: bool, data_bytes: int, what: str) -> None:
    """A training run of a network of ``parameters`` whose modules output ``activations`` values and cost
    ``multiply_adds`` per example (forward): the parameters (:func:`check_parameters`); the memory of one step,
    float32 weights, gradients (and momentum buffers) plus every module's output kept for the backward pass and its
    gradient, 4·(P·(2 or 3) + 2·batch·A) bytes, with the training data (``data_bytes``); the work of the run,
    steps·batch·(1 + :data:`BACKWARD_WORK`)·multiply-adds."""
    check_parameters(parameters, what)
    memory = FLOAT32 * (parameters * (3 if momentum else 2) + 2 * batch * activations) + data_bytes
    require_memory(f"Training {what} at batch size {batch:,}", memory,
                   "Lower the batch size or the network's widths, or train on fewer images or crops.")
    work = steps * batch * (1 + BACKWARD_WORK) * multiply_adds
    budget = analysis_budget()
    if work > budget.training_work:
        raise AnalysisError(f"Training {what} for {steps:,} steps at batch size {batch:,} would cost "
                            f"{work / 1e12:,.1f} trillion multiply-adds, over the {budget.training_tmac:,.0f} trillion "
                            f"a training run may cost ({TRAINING_VARIABLE}); refused before training. Use fewer steps, "
                            "a smaller batch or a smaller network.")
def check_scaled_images(resize_size: int, what: str) -> None:
    """Preprocessing that resizes every image to ``resize_size`` pixels on its edge: :data:`SCALED_BATCH` float32 RGB
    images at that scale, which every analysis holds at once, within the memory budget; checked when the
    preprocessing is chosen (a link, the sidebar, ``--input-size``), before any image is read."""
    scale = f"{SCALED_BATCH} images at the model's scale, {resize_size:,}×{resize_size:,} pixels, at once"
    require_memory(f"{what} ({scale})", SCALED_BATCH * 3 * FLOAT32 * resize_size**2,
                   "Lower the input size or raise the crop fraction.")


def check_decoding(width: int, height: int, scans: int, label: str) -> None:
    """Decoding ``scans`` progressive scans of a width × height image: at most :data:`MAX_DECODE_PIXEL_SCANS`."""
    if width * height * scans > MAX_DECODE_PIXEL_SCANS:
        raise DataError(f"{label} is a progressive image of {scans:,} scans over {width:,}×{height:,} pixels: "
                        f"{width * height * scans:,} pixel-scans to decode, over the {MAX_DECODE_PIXEL_SCANS:,} "
                        "limit; refused before decoding. Save it as a baseline (non-progressive) JPEG or a PNG.")
