"""Energy profiles e_i of a layer's filters on the patch PCA of their input (Chowers & Weiss, Def. 2.2), the
one-parameter linear-theory fit (ηt, Pearson r), the random-init baseline, and the correlation between models.

Example:
    python -m fl_core energy --model demo:tiny_vgg --model demo:tiny_vgg_init --json energy.json
"""

from __future__ import annotations

import argparse

from fl_core.cli import add_image_arguments, add_model_arguments, load_models
from fl_core.firstlayer.settings import EnergySettings
from fl_core.settings import add_settings_arguments, settings_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_image_arguments(parser)
    add_settings_arguments(parser, EnergySettings)
    parser.add_argument("--subtract-init", action="store_true",
                        help="subtract each model's initialization checkpoint (demo models know theirs)")
    parser.add_argument("--init", action="append", default=[], metavar="SPEC",
                        help="initialization checkpoint to subtract, one per --model in order")


def run(args: argparse.Namespace, progress):
    from fl_core.firstlayer.energy import analyze_energy
    from fl_core.io.images import open_images
    from fl_core.io.models import load_model

    models = load_models(args)
    inits = {}
    for i, loaded in enumerate(models):
        init_spec = args.init[i] if i < len(args.init) else (loaded.init_spec if args.subtract_init else None)
        if init_spec:
            inits[loaded.spec] = load_model(init_spec, input_overrides=None)
    result = analyze_energy(models, open_images(args.images, args.max_images), settings_from_args(EnergySettings, args),
                            inits=inits, device=args.device, progress=progress)
    print(f"patch PCA: {result.n_patches:,} patches from {result.images}")
    for m in result.models:
        extra = " [deeper layer: extension beyond the paper]" if m.beyond_paper else ""
        fit = m.theory
        print(f"{m.label} @ {m.layer}{extra}: theory fit r = {fit.r:.3f}, r on log values = {fit.r_log:.3f} "
              f"(eta_t = {fit.eta_t:.3g}; curve {fit.affine.a:.3f} + {fit.affine.b:.3f}·theory); "
              f"random init r = {m.random_init.mean:.3f} ± {m.random_init.sd:.3f}; "
              f"vs random-init profiles {m.random_init.vs_profile_mean:+.3f} ± {m.random_init.vs_profile_sd:.3f}")
    if len(result.models) > 1:
        print("profile correlations (Pearson):")
        print(result.correlation_frame().round(3).to_string())
    return result
