"""List each model's convolutions (kind, shape, stride, groups), its input preprocessing and load notes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pandas as pd

from fl_core.cli import add_model_arguments, load_models
from fl_core.io.layers import conv_inventory, inventory_frame
from fl_core.results import Result


@dataclass(frozen=True)
class InspectResult(Result):
    """Per model: its description (spec, input config, notes) and its convolution table."""

    models: list[dict]

    def to_frame(self) -> pd.DataFrame:
        frames = [pd.DataFrame(m["layers"]).assign(spec=m["spec"]) for m in self.models]
        return pd.concat(frames, ignore_index=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)


def inspect_models(models: list) -> InspectResult:
    entries = []
    for loaded in models:
        table = inventory_frame(conv_inventory(loaded))
        entries.append({**loaded.describe(), "layers": table.to_dict(orient="records")})
    return InspectResult(models=entries)


def run(args: argparse.Namespace, progress) -> InspectResult:
    result = inspect_models(load_models(args))
    for entry in result.models:
        cfg = entry["input_config"]
        print(f"{entry['label']}: {entry['parameters']:,} parameters, input {cfg['input_size']}px "
              f"(crop {cfg['crop_pct']:g}, {cfg['crop_mode']}, {cfg['interpolation']}), mean {cfg['mean']}, "
              f"std {cfg['std']}")
        for note in entry["notes"]:
            print(f"  note: {note}")
        print(pd.DataFrame(entry["layers"]).to_string(index=False))
    return result
