"""Channel Axes of one conv layer (Safaai et al. 2026, proposed definitions): the local axis (input capture, peer
overlap, peer R²), the target axis (task and target-excess information), lesions and peer replacement, FLOPs-matched
pruning curves with and without a recovery fine-tune, and how the axes relate (Spearman ρ, ARI, which predicts
removability better).

Examples:
    python -m fl_core channels --model demo:tiny_vgg --layer features.14 --compare-init --json axes.json
    python -m fl_core channels --model torchvision:squeezenet1_0=squeezenet.pt --layer features.12.squeeze \\
        --data /data/imagenet/val --calibration 512 --evaluation 256 --finetune-steps 20 --csv channels.csv
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from fl_core.channelaxes.settings import ChannelDataSettings, ChannelSettings, PruningSettings
from fl_core.cli import add_model_arguments, load_models
from fl_core.errors import ModelSpecError
from fl_core.settings import add_settings_arguments, settings_from_args

if TYPE_CHECKING:
    from fl_core.channelaxes.analysis import ChannelAxesResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_settings_arguments(parser, ChannelDataSettings)
    add_settings_arguments(parser.add_argument_group("analysis"), ChannelSettings, exclude=("pruning",))
    add_settings_arguments(parser.add_argument_group("pruning"), PruningSettings)
    group = parser.add_argument_group("initialization")
    group.add_argument("--init", metavar="SPEC", help="the same architecture at initialization, to compare the axes")
    group.add_argument("--compare-init", action="store_true", help="use the model's known initialization (demos)")


def channel_settings(args: argparse.Namespace) -> ChannelSettings:
    """The analysis the options ask for (``--criteria`` without criteria: no pruning curves)."""
    pruning = settings_from_args(PruningSettings, args) if args.criteria else None
    return settings_from_args(ChannelSettings, args, pruning=pruning)


def run(args: argparse.Namespace, progress) -> ChannelAxesResult:
    import torch

    from fl_core.channelaxes.analysis import analyze_channels
    from fl_core.channelaxes.calibration import channel_data
    from fl_core.channelaxes.estimate import estimate_channels
    from fl_core.io.models import load_model

    torch.manual_seed(args.seed)  # random-init registry models (e.g. an --init baseline) are drawn reproducibly
    models = load_models(args)
    if len(models) != 1:
        raise ModelSpecError("channels analyses one model: give one --model (and --init for its initialization).")
    loaded = models[0]
    init_spec = args.init or (loaded.init_spec if args.compare_init else None)
    init = load_model(init_spec) if init_spec else None
    asked = settings_from_args(ChannelDataSettings, args)
    data = channel_data(loaded, asked.source, asked.n_calibration, asked.n_evaluation, asked.seed)
    settings = channel_settings(args)
    estimate = estimate_channels(loaded, data, settings, init=init, device=args.device)
    print(f"expected: {estimate.text()} ({', '.join(f'{k} {v:.0f} s' for k, v in estimate.stages.items())})",
          file=sys.stderr)
    result = analyze_channels(loaded, data, settings, init=init, device=args.device, progress=progress)
    print_summary(result)
    return result


def print_summary(result: ChannelAxesResult) -> None:
    """The numbers a reader wants first, on stdout."""
    site = result.site
    print(f"{result.label} @ {result.layer}: {site.n_channels} channels, observed at {site.activation} "
          f"({result.positions} positions/image); data: {result.data}")
    for warning in result.warnings:
        print(f"note: {warning}")
    print(f"calibration accuracy {result.calibration_accuracy:.1%}, loss {result.calibration_loss:.3f}")
    axes = result.axes
    print(f"Spearman rho(I_X, task info) = {axes.spearman:+.3f}; rho(local, target composite) = "
          f"{axes.spearman_composite:+.3f}")
    agreement = axes.agreement
    if agreement:
        print(f"ARI (k={agreement.k}, median of {len(agreement.ari)} seeds) = {agreement.ari_median:+.3f} "
              f"(permutation null {agreement.null_median:+.3f}, p = {agreement.p_value:.3f})")
    if result.init_axes is not None:
        ari = result.init_axes.agreement.ari_median if result.init_axes.agreement else float("nan")
        print(f"at initialization ({result.init_spec}): rho = {result.init_axes.spearman:+.3f}, ARI = {ari:+.3f}")
    if result.interventions is not None:
        effects = result.interventions.effects
        print(f"lesions: intact top-1 {result.interventions.base_accuracy:.1%}, loss "
              f"{result.interventions.base_loss:.3f} on {effects.n_images} images ({effects.mode} mode, "
              f"{effects.passes} passes of {effects.copies_per_pass} copies)")
    removability = result.removability
    if removability.lesion_spearman:
        print(f"removability by lesion: rho(local score, dloss) = {removability.lesion_spearman['local']:+.3f}, "
              f"rho(target score, dloss) = {removability.lesion_spearman['target']:+.3f} -> better axis: "
              f"{removability.better_axis_lesion or 'neither (a tie, or no lesion changed the loss)'}")
    if removability.refinement:
        r = removability.refinement
        print(f"peer support refines removability: lesion rank-R2 {r['r2_base']:.3f} -> {r['r2_with_peers']:.3f} "
              f"(gain {r['gain']:+.3f})")
    if result.pruning is not None:
        pruning = result.pruning
        print(f"pruning {pruning.layer}: channels removed {pruning.channels_removed}, MACs removed "
              f"{', '.join(f'{f:.2%}' for f in pruning.flops_removed)} of {pruning.macs[0] / 1e6:,.1f}M")
        for name, curve in pruning.curves.items():
            tuned = f", fine-tuned {curve.auc_finetuned:.3f}" if curve.auc_finetuned is not None else ""
            print(f"  AUC {name:14s} {curve.auc:.3f}{tuned}")
        for note in pruning.notes:
            print(f"  note: {note}")
        for name, reason in pruning.skipped.items():
            print(f"  {name}: skipped ({reason})")
        if {"local", "target"} <= set(removability.pruning_auc):
            print(f"better axis by pruning AUC: {removability.better_axis_pruning or 'neither (a tie)'}")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items()))
