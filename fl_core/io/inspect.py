"""What a loaded model is: its description (spec, parameters, input preprocessing, load notes) and its convolutions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from fl_core.arguments import ModelLike, as_models
from fl_core.io.layers import conv_inventory, inventory_frame
from fl_core.results import Result, with_model_columns


@dataclass(frozen=True)
class InspectResult(Result):
    """What :func:`inspect_models` found.

    Attributes:
        models: per model, its description (:meth:`~fl_core.io.models.LoadedModel.describe`) and its convolution
            table (``layers``: one record per convolution, :func:`~fl_core.io.layers.inventory_frame`).
    """

    models: list[dict]

    _figures: ClassVar[dict[str, str]] = {"convolutions": "fl_core.io.plots:convolutions_figure"}

    def to_frame(self) -> pd.DataFrame:
        """Every model's convolutions, one row each, after the model's label and spec."""
        frames = [with_model_columns(pd.DataFrame(m["layers"]), m["label"], m["spec"]) for m in self.models]
        return pd.concat(frames, ignore_index=True)

    def summary_frame(self) -> pd.DataFrame:
        """One row per model: label, spec, weights only, random init, parameters, input size and crop."""
        return pd.DataFrame([{"model": m["label"], "spec": m["spec"], "weights only": m["weights_only"],
                              "random init": m["random_init"], "parameters": m["parameters"],
                              "input": f"{m['input_config']['input_size']} px, crop "
                                       f"{m['input_config']['crop_pct']:.3g}"} for m in self.models])


def inspect_models(models: ModelLike | Sequence[ModelLike]) -> InspectResult:
    """The description and convolution table of each model.

    Args:
        models: one model or several (spec strings, loaded models or ``nn.Module`` objects).
    """
    models = as_models(models)
    return InspectResult(models=[{**loaded.describe(), "layers": inventory_frame(conv_inventory(loaded)).to_dict(
        orient="records")} for loaded in models])
