"""Shared behaviour of analysis results: frozen dataclasses with ``to_dict()`` (JSON-safe) and ``to_frame()``."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import torch


def jsonable(value: Any) -> Any:
    """Convert arrays, tensors, numpy scalars, dataclasses and non-finite floats into plain JSON values.

    NaN and ±inf become ``None`` (JSON has no such numbers).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return value.to_dict()
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Result:
    """Mixin for frozen dataclass results (tabular ones add ``to_frame() -> pandas.DataFrame``).

    Subclasses list fields that should not be serialised (large arrays kept for plotting, such as images) in
    ``_private_fields``.
    """

    _private_fields: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of every public field."""
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.name not in self._private_fields
        }

    def to_json(self, indent: int | None = 2) -> str:
        """``to_dict()`` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)
