"""Channel Axes of one conv layer (Safaai et al. 2026, proposed definitions): the local axis (input capture, peer
overlap, peer R²), the target axis (task and target-excess information), lesions and peer replacement, FLOPs-matched
pruning curves with and without a recovery fine-tune, and how the axes relate (Spearman ρ, ARI, which predicts
removability better).

Several ``--layer`` options (or ``--layer all``) analyse the layers in one call, sharing the statistics passes; the
JSON then holds ``layers`` (one object per layer, each with the one-layer keys) and the paper's ``claims`` over all
of them. ``--flops-targets`` then prunes the layers together to those fractions of the network's MACs, each pruned
network recovered by the fixed ``--recovery-steps`` fine-tune (JSON ``network_pruning``).

On a Training Lab run folder (``--model weights:RUN_DIR``) it measures the run's followed layer (or ``--layer``) at
every checkpoint the run kept, on the run's validation crops with the run's settings: the rows ``train
--channel-axes`` stored (JSON: ``layer``, ``snapshots``). On a plain folder of one run's checkpoints with its
architecture (``--model cifar:resnet20=DIR``, ``timm:NAME=DIR``, ``torchvision:NAME=DIR``) it measures ``--layer`` at
every checkpoint, in training order (the epoch or step they record, else their names' natural order), on
``--calibration`` images of ``--data`` labelled with the model's classes: the same rows and JSON.

Examples:
    python -m fl_core channels --model demo:tiny_vgg --layer features.14 --compare-init --json axes.json
    python -m fl_core channels --model torchvision:squeezenet1_0=squeezenet.pt --layer features.12.squeeze \\
        --data /data/imagenet/val --calibration 512 --evaluation 256 --finetune-steps 20 --csv channels.csv
    python -m fl_core channels --model demo:mobilenet_v2 --layer features.10.conv.2 --layer features.16.conv.2 \\
        --init torchvision:mobilenet_v2 --init-seeds 3 --data imagenet-sample --calibration 384 --json axes.json
    python -m fl_core channels --model demo:mobilenet_v2 --layer features.10.conv.2 --layer features.13.conv.2 \\
        --layer features.16.conv.2 --data imagenet-sample --lesions --criteria local target l1 random \\
        --flops-targets 0.1 0.2 0.3 --json pruned.json
    python -m fl_core channels --model weights:runs/vgg --json axes_over_training.json
    python -m fl_core channels --model cifar:resnet20=checkpoints/ --layer layer2.0.conv1 --data cifar10:/data \\
        --calibration 512 --json axes_over_training.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fl_core.channelaxes.settings import ChannelDataSettings, ChannelSettings, PruningSettings
from fl_core.cli import add_model_arguments, input_overrides, load_models
from fl_core.errors import ModelSpecError
from fl_core.settings import add_settings_arguments, settings_from_args

if TYPE_CHECKING:
    from fl_core.channelaxes.analysis import ChannelAxesResult
    from fl_core.channelaxes.claims import ClaimsTable
    from fl_core.channelaxes.pruning import NetworkPruningResult
    from fl_core.channelaxes.sweep import ChannelSweepResult
    from fl_core.channelaxes.training import AxesTrajectory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_settings_arguments(parser, ChannelDataSettings)
    analysis = parser.add_argument_group("analysis")
    analysis.add_argument("--layer", action="append", default=[], metavar="NAME",
                          help="the convolution analysed (default: the model's default layer); repeat it for several "
                               "layers in one run, or 'all' for every convolution")
    add_settings_arguments(analysis, ChannelSettings, exclude=("pruning", "layer"))
    add_settings_arguments(parser.add_argument_group("pruning"), PruningSettings)
    group = parser.add_argument_group("initialization")
    group.add_argument("--init", metavar="SPEC", help="the same architecture at initialization, to compare the axes")
    group.add_argument("--compare-init", action="store_true", help="use the model's known initialization (demos)")


def channel_settings(args: argparse.Namespace) -> ChannelSettings:
    """The analysis the options ask for (``--criteria`` without criteria: no pruning curves, unless
    ``--flops-targets`` asks to prune the layers together; one ``--layer``: that layer)."""
    pruning = settings_from_args(PruningSettings, args) if args.criteria or args.flops_targets else None
    layer = args.layer[0] if len(args.layer) == 1 and args.layer != ["all"] else None
    return settings_from_args(ChannelSettings, args, pruning=pruning, layer=layer)


def several_layers(args: argparse.Namespace) -> bool:
    """Several ``--layer`` options, ``--layer all``, or layers pruned together (``--flops-targets``): a sweep over
    the layers."""
    return len(args.layer) > 1 or args.layer == ["all"] or bool(args.flops_targets)


def run(args: argparse.Namespace, progress) -> ChannelAxesResult | ChannelSweepResult | AxesTrajectory:
    from fl_core.channelaxes.analysis import analyze_channels, resolve_layers
    from fl_core.channelaxes.calibration import channel_data
    from fl_core.channelaxes.estimate import channels_estimate, estimate_channels
    from fl_core.channelaxes.sweep import sweep_channels
    from fl_core.io.models import load_model
    from fl_core.lab.axes import checkpoint_folder, folder_axes, run_axes

    run_folder = training_run(args.model)
    if run_folder is not None:
        if len(args.layer) > 1:
            raise ModelSpecError("On a Training Lab run folder give at most one --layer (default: the one it "
                                 "followed).")
        trajectory = run_axes(run_folder, args.layer[0] if args.layer else None, device=args.device,
                              progress=progress)
        print_trajectory(trajectory)
        return trajectory
    if len(args.model) == 1 and checkpoint_folder(args.model[0]) is not None:
        if len(args.layer) > 1 or args.layer == ["all"]:
            raise ModelSpecError("On a folder of checkpoints give at most one --layer (default: the model's default "
                                 "layer).")
        trajectory = folder_axes(args.model[0], args.layer[0] if args.layer else None,
                                 settings_from_args(ChannelDataSettings, args), channel_settings(args),
                                 input_overrides=dict(input_overrides(args)), device=args.device, progress=progress)
        print_trajectory(trajectory)
        return trajectory
    models = load_models(args)
    if len(models) != 1:
        raise ModelSpecError("channels analyses one model: give one --model (and --init for its initialization).")
    loaded = models[0]
    settings = channel_settings(args)
    layers = ("all" if args.layer == ["all"] else args.layer or [None]) if several_layers(args) else None
    if layers is not None:
        layers = [lay.name for lay in resolve_layers(loaded, layers)]  # every layer checked before any image is read
    init_spec = args.init or (loaded.init_spec if args.compare_init else None)
    init = load_model(init_spec) if init_spec else None
    asked = settings_from_args(ChannelDataSettings, args)
    data = channel_data(loaded, asked.source, asked.n_calibration, asked.n_evaluation, asked.seed)
    estimate = (estimate_channels(loaded, data, settings, init=init, device=args.device) if layers is None else
                channels_estimate(loaded, layers, len(data.calibration), len(data.evaluation), settings,
                                  init is not None, args.device))
    print(f"expected: {estimate.text()} ({', '.join(f'{k} {v:.0f} s' for k, v in estimate.stages.items())})",
          file=sys.stderr)
    if layers is None:
        result = analyze_channels(loaded, data, settings, init=init, device=args.device, progress=progress)
        print_summary(result)
        print_claims(result.claims())
        return result
    sweep = sweep_channels(loaded, data, settings, layers=layers, init=init, device=args.device, progress=progress)
    for result in sweep.layers:
        print_summary(result)
        print()
    print_depth(sweep)
    if sweep.network_pruning is not None:
        print_network_pruning(sweep.network_pruning)
    print_claims(sweep.claims())
    return sweep


def print_network_pruning(pruning: NetworkPruningResult) -> None:
    """The layers pruned together: MACs removed at each target, each criterion's AUC (percentage points, interval,
    evaluation images) before and after the recovery fine-tune, and the paired local − target difference."""
    from fl_core.channelaxes.pruning import auc_text

    print(f"{len(pruning.layers)} layers pruned together ({', '.join(pruning.layers)}): MACs removed "
          f"{', '.join(f'{f:.1%}' for f in pruning.flops_removed[1:])} for targets "
          f"{', '.join(f'{t:.0%}' for t in pruning.targets)}; recovery: {pruning.recovery_steps} fine-tune steps on "
          f"{pruning.recovery_images} calibration images")
    for name, curve in pruning.curves.items():
        recovered = "" if curve.auc_recovered_pp is None else \
            f"; recovered {auc_text(curve.auc_recovered_pp, curve.auc_recovered_pp_ci, pruning.n_images)}"
        print(f"  AUC {name:14s} {auc_text(curve.auc_pp, curve.auc_pp_ci, pruning.n_images)}{recovered}")
    for key, difference in pruning.differences.items():
        print(f"  local - target ({'before recovery' if key == 'auc' else 'recovered'}): "
              f"{auc_text(difference['local_minus_target_pp'], difference['ci'], pruning.n_images)}")
    for target in pruning.unreachable:
        print(f"  target {target:.0%}: not reachable, the layers hold less of the network's MACs")
    for note in pruning.notes:
        print(f"  note: {note}")
    for name, reason in pruning.skipped.items():
        print(f"  {name}: skipped ({reason})")


def training_run(specs: list[str]) -> Path | None:
    """The folder of a single ``weights:DIR`` spec that is a Training Lab run folder (``None`` otherwise)."""
    from fl_core.lab.axes import is_run_folder
    from fl_core.report.series import folder_of

    folder = folder_of(specs[0]) if len(specs) == 1 else None
    return folder if folder is not None and is_run_folder(folder) else None


def print_trajectory(trajectory: AxesTrajectory) -> None:
    """A layer's axes at every snapshot: ρ, ARI, measurable task information and the claim-5 cosines, intervals in
    brackets."""

    def value(number: float, interval: list[float] | None) -> str:
        if number != number:
            return "–"
        return f"{number:+.2f}" + (f" [{interval[0]:+.2f}, {interval[1]:+.2f}]" if interval and
                                   interval[0] is not None else "")

    first = trajectory.snapshots[0] if trajectory.snapshots else None
    print(f"{trajectory.layer} over training, on {trajectory.data}; intervals: {trajectory.bootstrap} bootstrap "
          f"resamples of the images (seed {trajectory.seed})" + (f", noise floor {first.noise_floor:.4f} nats"
                                                                  if first else ""))
    print(f"{'step':>6}  {'rho(I_X, I(a;m))':22s} {'ARI':22s} {'measurable I':>12}  {'cos(update, grad I_X)':22s} "
          f"{'cos(update, grad I)':22s} accuracy")
    for s in trajectory.snapshots:
        print(f"{s.step:6d}  {value(s.spearman, s.spearman_ci):22s} {value(s.ari, s.ari_ci):22s} "
              f"{s.significant_share:12.0%}  "
              f"{value(s.cosines['cos_update_capture'], s.cosines_ci.get('cos_update_capture')):22s} "
              f"{value(s.cosines['cos_update_information'], s.cosines_ci.get('cos_update_information')):22s} "
              f"{s.accuracy:.1%}")
    if trajectory.snapshots:
        print_claims(trajectory.claims())


def print_depth(sweep: ChannelSweepResult) -> None:
    """ρ and ARI per layer against depth, trained and at initialization, with their intervals."""

    def interval(value: float, low: float, high: float) -> str:
        return f"{value:+.3f} [{low:+.2f}, {high:+.2f}]" if value == value else "–"

    print("layer                      depth  rho trained             rho init                ARI trained  "
          "measurable I (trained / init)")
    for row in sweep.depth_frame().itertuples():
        print(f"{row.layer:26s} {row.depth:5d}  {interval(row.spearman, row.spearman_low, row.spearman_high):22s}  "
              f"{interval(row.init_spearman, row.init_spearman_low, row.init_spearman_high):22s}  {row.ari:+.3f}"
              f"       {row.significant_share:.0%} / {row.init_significant_share:.0%}")


def print_claims(table: ClaimsTable) -> None:
    """The paper's claims, one line each with the measurement, its interval and the verdict."""
    print("the paper's claims (Safaai et al. 2026), measured here:")
    for row in table.claims:
        measured = "not measured" if row.measured is None else f"{row.measured:+.3f}" + (
            f" [{row.ci_low:+.3f}, {row.ci_high:+.3f}]" if row.ci_low is not None else " (no interval)")
        print(f"  {row.number}. {row.claim}: {measured} -> {row.verdict.upper()}")
        print(f"     paper: {row.paper}")
        print(f"     why: {row.why}")
    if table.claims:
        print(f"  settings: {table.claims[0].settings}")


def print_summary(result: ChannelAxesResult) -> None:
    """The numbers a reader wants first, on stdout."""
    site = result.site
    print(f"{result.label} @ {result.layer}: {site.n_channels} channels, observed at {site.activation} "
          f"({result.positions} positions/image); data: {result.data}")
    for warning in result.warnings:
        print(f"note: {warning}")
    print(f"calibration accuracy {result.calibration_accuracy:.1%}, loss {result.calibration_loss:.3f}")
    axes = result.axes
    print(f"Spearman rho(I_X, task info) = {axes.spearman:+.3f}{ci_text(axes.spearman_ci)}; rho(local, target "
          f"composite) = {axes.spearman_composite:+.3f}{ci_text(axes.spearman_composite_ci)}")
    agreement = axes.agreement
    if agreement:
        print(f"ARI (k={agreement.k}, median of {len(agreement.ari)} seeds) = {agreement.ari_median:+.3f}"
              f"{ci_text(axes.ari_ci)} (permutation null {agreement.null_median:+.3f}, p = {agreement.p_value:.3f})")
    if axes.significance is not None and axes.significance.noise_floor_share > 0.5:
        print("note: most channels carry no measurable task information on these images, so a rho near 0 is partly "
              "the estimator's noise")
    print(result.noise_floor_sentence())
    init = result.init_summary
    if init is not None:
        seeds = [s.seed for s in result.init_seeds_axes if s.seed is not None]
        mode = result.init_axes.shared_mode
        print(f"at initialization ({result.init_spec}"
              + (f", seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}" if seeds else "")
              + f", BatchNorm {'recalibrated' if result.init_recalibrated else 'as initialized'}): rho = "
              f"{init.spearman:+.3f}{ci_text(init.spearman_ci)}, ARI = {result.init_axes.ari:+.3f}"
              f"{ci_text(result.init_axes.ari_ci)}")
        if mode is not None:
            print(f"  shared mode at initialization: first principal component {mode.variance_share:.0%} of the "
                  f"pooled variance, |corr with the margin| {abs(mode.margin_correlation):.2f}; rho without it "
                  f"{mode.spearman_without:+.3f}")
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
    if removability.relevance is not None:
        relevance = removability.relevance
        print(f"within {relevance.bins} task-relevance bins, rho(., lesion dloss): " + ", ".join(
            f"{name} {value:+.3f}{ci_text(relevance.ci.get(name))}" for name, value in relevance.pooled.items()))
    if removability.refinement:
        r = removability.refinement
        print(f"lesion rank-R2 on [I_X, task info] {r['r2_base']:.3f} -> {r['r2_with_peers']:.3f} with peer overlap "
              f"and peer R2 (gain {r['gain']:+.3f}; the project's own test, in-sample)")
    if result.pruning is not None:
        from fl_core.channelaxes.pruning import curve_auc_text

        pruning = result.pruning
        print(f"pruning {pruning.layer}: channels removed {pruning.channels_removed}, MACs removed "
              f"{', '.join(f'{f:.2%}' for f in pruning.flops_removed)} of {pruning.macs[0] / 1e6:,.1f}M")
        for name, curve in pruning.curves.items():
            tuned = f", fine-tuned {curve_auc_text(curve, pruning.n_images, True)}" \
                if curve.auc_finetuned is not None else ""
            print(f"  AUC {name:14s} {curve_auc_text(curve, pruning.n_images)}{tuned}")
        for note in pruning.notes:
            print(f"  note: {note}")
        for name, reason in pruning.skipped.items():
            print(f"  {name}: skipped ({reason})")
        if {"local", "target"} <= set(removability.pruning_auc):
            print(f"better axis by pruning AUC: {removability.better_axis_pruning or 'neither (a tie)'}")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items()))


def ci_text(interval: list[float] | None) -> str:
    """`` [low, high]`` of a bootstrap interval, or nothing."""
    return f" [{interval[0]:+.3f}, {interval[1]:+.3f}]" if interval and interval[0] == interval[0] else ""
