"""The norm of every filter of every convolution (weights only: any architecture) and the near-zero filters.

Example:
    python -m fl_core filternorms --model demo:squeezenet1_0 --zero-tol 0.01 --json norms.json
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fl_core.cli import add_model_arguments, single_model
from fl_core.filternorms.settings import FilterNormsSettings
from fl_core.settings import add_settings_arguments, settings_from_args

if TYPE_CHECKING:
    from fl_core.filternorms.analysis import FilterNormsResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_settings_arguments(parser, FilterNormsSettings)


def run(args: argparse.Namespace, progress) -> FilterNormsResult:
    from fl_core.filternorms.analysis import analyze_filter_norms

    result = analyze_filter_norms(single_model(args), settings=settings_from_args(FilterNormsSettings, args),
                                  device=args.device, progress=progress)
    frame = result.to_frame()
    print(f"{result.label}: {len(frame):,} filters in {len(result.layers)} convolutions, "
          f"{int(frame['near_zero'].sum())} near zero")
    return result
