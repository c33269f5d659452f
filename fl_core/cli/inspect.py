"""List each model's convolutions (kind, shape, stride, groups), its input preprocessing and load notes."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fl_core.cli import add_model_arguments, load_models

if TYPE_CHECKING:
    from fl_core.io.inspect import InspectResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)


def run(args: argparse.Namespace, progress) -> InspectResult:
    import pandas as pd

    from fl_core.io.inspect import inspect_models

    result = inspect_models(load_models(args))
    for entry in result.models:
        print(f"{entry['label']}: {entry['parameters']:,} parameters; preprocessing {entry['preprocessing']}")
        for note in entry["notes"]:
            print(f"  note: {note}")
        print(pd.DataFrame(entry["layers"]).to_string(index=False))
    return result
