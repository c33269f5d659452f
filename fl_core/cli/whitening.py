"""Normalized spatial autocorrelation C(δ)/C(0) of RGB, of each model's learned first-layer responses, of
random-init banks (mean ± sd over seeds) and of the ideal ZCA whitening bank (Chowers & Weiss §5).

Example:
    python -m fl_core whitening --model demo:tiny_vgg --max-distance 12 --json whitening.json
"""

from __future__ import annotations

import argparse

from fl_core.cli import add_image_arguments, add_model_arguments, load_models
from fl_core.firstlayer.settings import WhiteningSettings
from fl_core.settings import add_settings_arguments, settings_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_image_arguments(parser)
    add_settings_arguments(parser, WhiteningSettings)


def run(args: argparse.Namespace, progress):
    from fl_core.firstlayer.whitening import analyze_whitening
    from fl_core.io.images import open_images

    models = load_models(args)
    settings = settings_from_args(WhiteningSettings, args)
    result = analyze_whitening(models, open_images(args.images, args.max_images), settings, device=args.device,
                               progress=progress)
    distance = min(10, settings.max_distance)
    print(f"C(δ)/C(0) at δ = {distance} px ({result.images}):")
    for name, value in result.at(distance).items():
        print(f"  {result.labels.get(name, name):40s} {value:.3f}")
    return result
