"""The initialization a trained network's axes are compared with (docs/methods.md, "The initialization").

* **Seeds.** A registry architecture at random init (``torchvision:NAME``, ``timm:NAME``, ``cifar:NAME``) is drawn
  from each seed ``init_seed, init_seed + 1, ...`` (:func:`fl_core.io.models.load_random_init`); a fixed
  initialization checkpoint (a demo's own) is one network, one seed.
* **BatchNorm recalibration.** A random init keeps its BatchNorm running statistics at mean 0 and variance 1, so in
  eval mode its activations grow with depth and the late layers' statistics are set by that scale. With
  ``init_recalibrate`` the running statistics are re-estimated on the calibration images first (train-mode passes
  without gradients, cumulative averages: ``torch.optim.swa_utils.update_bn``): the network as training's first
  step sees it, every BatchNorm normalising its input.
* **The shared mode** (:func:`shared_mode`): at initialization one direction of the pooled activations (their first
  principal component) carries much of their variance and correlates with the margin; channels that load on it have
  both a high input capture and a high task information, which couples the axes. Its variance share, its
  correlation with the margin and ρ(I_X, I(ā;m)) once it is projected out say how much of the coupling it explains.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fl_core.arguments import ModelLike, as_model
from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.comparison import spearman
from fl_core.channelaxes.information import copula_normalize, gaussian_mi
from fl_core.errors import ArgumentError
from fl_core.io.models import LoadedModel, load_random_init
from fl_core.io.specs import is_random_init_spec
from fl_core.results import Result


def init_networks(init: ModelLike, first_seed: int, seeds: int) -> list[tuple[int | None, LoadedModel]]:
    """``(seed, network)`` of each initialization compared: ``seeds`` random inits from ``first_seed`` on, or the one
    fixed initialization ``init`` (seed ``None``).

    Raises:
        ArgumentError: several seeds (or a seed other than 0) asked of an initialization with fixed weights.
    """
    loaded = as_model(init, "init")
    if is_random_init_spec(loaded.spec) and loaded.random_init:
        return [(seed, loaded if seed == 0 else load_random_init(loaded.spec, seed))
                for seed in range(first_seed, first_seed + seeds)]
    if seeds > 1 or first_seed != 0:
        raise ArgumentError(f"init_seed / init_seeds: {loaded.label} is a fixed initialization (its weights are "
                            "given), so it has no other seeds; give a registry architecture at random init, e.g. "
                            "torchvision:NAME.")
    return [(None, loaded)]


def batchnorm_modules(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def recalibrate_batchnorm(model: nn.Module, inputs: LabelledInputs, device: torch.device, batch_size: int) -> int:
    """Re-estimate every BatchNorm's running statistics of ``model`` (a private copy, on ``device``) on ``inputs``
    (module docstring); returns how many BatchNorms there were. The model is left in eval mode."""
    norms = batchnorm_modules(model)
    if norms:
        torch.optim.swa_utils.update_bn((x.to(device) for x, _ in inputs.batches(batch_size)), model, device)
    model.eval()
    return len(norms)


@dataclass(frozen=True)
class SharedMode(Result):
    """The first principal component of a layer's pooled activations ā (N, C) (module docstring).

    Attributes:
        variance_share: its eigenvalue over the trace of the covariance of ā.
        margin_correlation: Pearson correlation of its scores with the margin (sign arbitrary).
        spearman_without: ρ(I_X, I(ā;m)) with the task information measured on ā minus its projection on the
            component.
    """

    variance_share: float
    margin_correlation: float
    spearman_without: float


def shared_mode(pooled: torch.Tensor, margin: torch.Tensor, input_capture: np.ndarray) -> SharedMode:
    """:class:`SharedMode` of pooled activations ``(N, C)`` with the margin ``(N,)`` and the channels' input
    capture."""
    x = pooled.detach().double().cpu()
    x = x - x.mean(0)
    covariance = x.T @ x / max(len(x) - 1, 1)
    values, vectors = torch.linalg.eigh(covariance)
    total = float(values.clamp_min(0).sum())
    if total <= 0:
        return SharedMode(float("nan"), float("nan"), float("nan"))
    component = vectors[:, -1]
    scores = (x @ component).numpy()
    m = margin.detach().double().cpu().numpy()
    correlation = float(np.corrcoef(scores, m)[0, 1]) if scores.std() > 0 and m.std() > 0 else float("nan")
    residual = x - torch.outer(x @ component, component)
    info = gaussian_mi(copula_normalize(residual), copula_normalize(margin.detach().double().cpu())).numpy()
    return SharedMode(variance_share=float(values[-1]) / total, margin_correlation=correlation,
                      spearman_without=spearman(input_capture, info))
