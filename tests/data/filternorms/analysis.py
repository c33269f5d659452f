"""Filter norms: ‖w_k‖₂ of every filter k of every convolution (its ``in/groups · kh · kw`` weights flattened), from
the weights alone, and the near-zero filters: ‖w_k‖ ≤ zero_tol · max_j ‖w_j‖ of their layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd
import torch

from fl_core.arguments import ModelLike, as_model, as_settings, no_data
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import ProgressLike, progress_callback, report
from fl_core.filternorms.settings import FilterNormsOverrides, FilterNormsSettings
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_core.results import Result, with_model_columns

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fl_core.io.models import LoadedModel
    from fl_core.survey.settings import SurveySettings


@dataclass(frozen=True)
class FilterNormsResult(Result):
    """The norm of every filter of a model's convolutions.

    Attributes:
        spec, label: the model.
        layers: the convolutions, in forward order.
        kinds: each convolution's kind (first, regular, depthwise, pointwise, ...).
        norms: each convolution's filter norms ‖w_k‖₂.
        zero_tol: the near-zero threshold, relative to the largest norm of the layer.
    """

    spec: str
    label: str
    layers: tuple[str, ...]
    kinds: tuple[str, ...]
    norms: tuple[np.ndarray, ...]
    zero_tol: float

    _figures: ClassVar[dict[str, str]] = {"norms": "fl_core.filternorms.plots:norms_figure",
                                          "zeros": "fl_core.filternorms.plots:near_zero_figure"}

    def near_zero(self) -> list[np.ndarray]:
        """Per convolution, which filters are near zero."""
        return [norms <= self.zero_tol * norms.max() for norms in self.norms]

    def to_frame(self) -> pd.DataFrame:
        """One row per filter, led by the model's label and spec: layer, kind, filter, norm, near_zero."""
        frame = pd.DataFrame({
            "layer": np.repeat(self.layers, [len(n) for n in self.norms]),
            "kind": np.repeat(self.kinds, [len(n) for n in self.norms]),
            "filter": np.concatenate([np.arange(len(n)) for n in self.norms]),
            "norm": np.concatenate(self.norms), "near_zero": np.concatenate(self.near_zero())})
        return with_model_columns(frame, self.label, self.spec)


def filter_norms(weight: torch.Tensor, device: torch.device) -> np.ndarray:
    """‖w_k‖₂ of each filter of one (K, C/g, kh, kw) weight, in float64."""
    return weight.detach().to(device=device, dtype=torch.float64).flatten(1).norm(dim=1).cpu().numpy()


def analyze_filter_norms(model: ModelLike, data: None = None, settings: FilterNormsSettings | None = None, *,
                         device: DeviceLike = None, progress: ProgressLike = None,
                         **setting_overrides: Unpack[FilterNormsOverrides]) -> FilterNormsResult:
    """The norm of every filter of every convolution of a model (weights only: any architecture).

    Args:
        model: a spec string, a loaded model or an ``nn.Module``.
        data: none: the weights are the data (the argument keeps the family's call shape).
        settings: the near-zero threshold and the smallest layer; ``setting_overrides`` replace fields.
        **setting_overrides: fields of ``settings`` to replace, by name (``zero_tol=0.01``).
        device: where the norms are computed.
        progress: ``progress(fraction, message)``; ``None``: a bar where a person is watching; ``False``: none.
    """
    no_data(data, "analyze_filter_norms")
    settings = as_settings(FilterNormsSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    loaded = as_model(model)
    chosen: list[ConvLayer] = [lay for lay in conv_inventory(loaded) if lay.out_channels >= settings.min_filters]
    norms = []
    for done, lay in enumerate(chosen):
        report(progress, done / max(1, len(chosen)), f"filter norms of {lay.name}")
        norms.append(filter_norms(loaded.state_dict[lay.weight_key], device))
    report(progress, 1.0, f"filter norms of {len(chosen)} convolutions")
    return FilterNormsResult(spec=loaded.spec, label=loaded.label, layers=tuple(lay.name for lay in chosen),
                             kinds=tuple(lay.kind for lay in chosen), norms=tuple(norms), zero_tol=settings.zero_tol)


def filter_norm_values(loaded: LoadedModel, settings: SurveySettings, device: Any) -> dict[str, float | int]:
    """The survey's numbers of one model: filters, the share near zero, the median norm."""
    result = analyze_filter_norms(loaded, settings=settings.family_settings, device=device, progress=False)
    norms = np.concatenate(result.norms)
    return {"filters": int(norms.size), "near_zero_share": float(np.concatenate(result.near_zero()).mean()),
            "median_norm": float(np.median(norms))}
