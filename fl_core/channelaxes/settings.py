"""The Channel Axes family's settings and the names they choose from (light: no torch, so the command line and the
family registry read them at once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from fl_core.settings import MAX_IMAGES, MAX_SEED, Settings, setting

CROPS = "crops"
"""The data source of the bundled labelled crops (:func:`fl_core.channelaxes.calibration.channel_data`)."""
LESION_KINDS = ("mean", "zero", "replace")
"""The interventions of :mod:`fl_core.channelaxes.interventions`."""


@dataclass(frozen=True)
class Criterion:
    """A channel-importance criterion: higher score = keep.

    Attributes:
        name: key used in results and on the command line.
        label: display name.
        axis: ``local``, ``target`` or ``baseline``.
        formula: the score and its sign convention.
        source: where it comes from.
    """

    name: str
    label: str
    axis: str
    formula: str
    source: str


CRITERIA: dict[str, Criterion] = {c.name: c for c in (
    Criterion("local", "local axis", "local", "mean percentile of I_X (high = keep) and R̄_X (low = keep)",
              "proposed composite of §1-2"),
    Criterion("target", "target axis", "target", "mean percentile of I(ā;m) and TE (high = keep)",
              "proposed composite of §3"),
    Criterion("input_capture", "input capture I_X", "local", "I_X normalized (high = keep)", "proposed §1"),
    Criterion("peer_overlap", "peer overlap R̄_X", "local", "−R̄_X (high overlap = replaceable = prune)",
              "proposed §2"),
    Criterion("peer_r2", "peer R²", "local", "−R²_peer held-out (well reconstructed = prune)", "proposed §4"),
    Criterion("task_info", "task information", "target", "I(ā;m) Gaussian-copula (high = keep)", "proposed §3.1"),
    Criterion("target_excess", "target-excess", "target", "TE = I(ā_i;m | ā_P) (high = keep)", "proposed §3.4"),
    Criterion("l1", "L1 norm", "baseline", "‖W_i‖₁", "Li et al. 2017; TP GroupMagnitudeImportance(p=1)"),
    Criterion("l2", "L2 norm", "baseline", "‖W_i‖₂²", "Li et al. 2017; TP GroupMagnitudeImportance(p=2)"),
    Criterion("bn_gamma", "BN |γ|", "baseline", "|γ_i| of the following BatchNorm", "Liu et al. 2017; TP "
              "BNScaleImportance"),
    Criterion("fpgm", "FPGM", "baseline", "Σ_j ‖|w_i|² − |w_j|²‖₂ (near the geometric median = prune; Torch-Pruning "
              "compares squared magnitudes where He et al. compare the signed filters)",
              "He et al. 2019; TP FPGMImportance"),
    Criterion("taylor", "Taylor", "baseline", "Σ |w ⊙ ∂L/∂w| on a calibration batch",
              "Molchanov et al. 2019; TP GroupTaylorImportance"),
    Criterion("random", "random", "baseline", "uniform (seeded)", "TP RandomImportance"),
)}


DEFAULT_CRITERIA = ("local", "target", "l1", "bn_gamma", "random")
"""The criteria compared by default: the two axes against a norm, BatchNorm |γ| and chance (the Channel Axes page's
first view; :data:`CRITERIA` lists the others)."""


@dataclass(frozen=True)
class PruningSettings(Settings):
    """The pruning protocol.

    Attributes:
        criteria: criteria to compare (keys of :data:`CRITERIA`; none on the command line: no pruning curves).
        fractions: fractions of the layer's channels removed at each point (the intact network is added at 0).
        finetune_steps: recovery fine-tune steps per pruned network (0 = none, the default: each fine-tune runs the
            whole network forward and backward, more than the curves themselves cost).
        finetune_lr: SGD step size of the fine-tune (0.01 collapsed a pruned SqueezeNet to chance; 1e-3 recovers it).
        finetune_batch: images per fine-tune step.
        gradient_images: calibration images for the Taylor gradients.
        compensate_mean: fold the removed channels' calibration means into the biases of the layers that read them
            directly (removal then acts like mean-ablation rather than zero-ablation; [proposed]).
        seed: seeds the random criterion and the fine-tune's batch order.
        flops_targets: fractions of the whole network's MACs removed by pruning the analysed layers together (the
            several-layer protocol of :func:`~fl_core.channelaxes.pruning.prune_network`; none: one layer at a time
            only).
        recovery_steps: the several-layer protocol's fixed recovery fine-tune: steps per pruned network (with
            ``finetune_lr`` and ``finetune_batch``; 0: none).
    """

    criteria: tuple[str, ...] = setting(DEFAULT_CRITERIA, choices=tuple(CRITERIA))
    fractions: tuple[float, ...] = setting((0.125, 0.25, 0.5, 0.75), minimum=0.0, maximum=1.0)
    finetune_steps: int = setting(0, minimum=0, maximum=10_000)
    finetune_lr: float = setting(1e-3, minimum=0.0, maximum=10.0)
    finetune_batch: int = setting(32, minimum=1, maximum=1024)
    gradient_images: int = setting(64, minimum=1, maximum=10_000)
    compensate_mean: bool = setting(True, flag="mean-compensation")
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)
    flops_targets: tuple[float, ...] = setting((), minimum=0.0, maximum=0.95)
    recovery_steps: int = setting(20, minimum=0, maximum=10_000)



@dataclass(frozen=True)
class AxisSettings(Settings):
    """Estimator choices of both axes (recorded with every result).

    Attributes:
        k: peers per channel (top-|ρ| of the per-position pre-activation correlation): R_X top-k, held-out R²,
            target-excess, pairwise and triplet proxies; also the ridge peers of the replacement (on ``a``).
        shrinkage: α of the shrunk correlation ``(1−α)C + αI`` (all-peer R², target-axis estimators).
        ridge: relative ridge strength λ = ridge·tr Σ / C of the top-k regressions.
        n_triplets: sampled peer pairs per channel for the triplet synergy.
        permutations: shuffles of the margin for each channel's task-information p-value (the smallest p-value is
            1/(permutations + 1)).
        bootstrap: resamples of the images for the confidence intervals of ρ, the ARI and the claims (0: none).
        seed: seeds the triplet sampling, the permutations and the bootstrap (and, in the analysis, everything else
            random).
    """

    k: int = setting(8, minimum=1, maximum=256)
    shrinkage: float = setting(1e-3, minimum=0.0, maximum=1.0)
    ridge: float = setting(1e-3, minimum=0.0, maximum=100.0)
    n_triplets: int = setting(64, minimum=1, maximum=4096)
    permutations: int = setting(999, minimum=19, maximum=100_000)
    bootstrap: int = setting(500, minimum=0, maximum=100_000)
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)



@dataclass(frozen=True)
class ChannelSettings(Settings):
    """How a layer is analysed.

    Attributes:
        layer: the convolution analysed (none: the default layer, the last non-depthwise convolution with at most
            256 channels, as the page and the command take it: :func:`~fl_core.channelaxes.site.channel_layer`;
            ``"first"``: the first convolution).
        axes: estimator choices of the two axes.
        lesion_kinds: interventions to run (``mean``, ``zero``, ``replace``; none: skip); by default mean-ablation and
            peer replacement (zero-ablation removes the channel's mean too, §5).
        cluster_k: k-means clusters per axis (ARI).
        cluster_seeds: k-means / permutation seeds (ARI).
        relevance_bins: quantile bins of task information within which lesion damage is compared with peer R², task
            information and input capture (the paper's claim 3).
        init_seed: seed of the random initialization compared (a registry architecture without weights; seed 0 is the
            network its spec loads).
        init_seeds: random initializations compared, seeds ``init_seed``, ``init_seed + 1``, ...
        init_recalibrate: re-estimate the BatchNorm running statistics of the initialization on the calibration images
            before measuring it (a random init keeps mean 0 and variance 1, so its activations grow with depth).
        pruning: the pruning protocol (default: :class:`PruningSettings`' defaults; ``None``: no pruning curves).
        batch_size: images per forward pass.
        memory_mb: activation memory for the batched lesions and the in-memory evaluation set.
    """

    layer: str | None = None
    axes: AxisSettings = field(default_factory=AxisSettings)
    lesion_kinds: tuple[str, ...] = setting(("mean", "replace"), choices=LESION_KINDS, flag="lesions")
    cluster_k: int = setting(4, minimum=2, maximum=64)
    cluster_seeds: int = setting(10, minimum=1, maximum=1000)
    relevance_bins: int = setting(4, minimum=1, maximum=64)
    init_seed: int = setting(0, minimum=0, maximum=MAX_SEED)
    init_seeds: int = setting(1, minimum=1, maximum=100)
    init_recalibrate: bool = setting(True)
    pruning: PruningSettings | None = field(default_factory=PruningSettings)
    batch_size: int = setting(32, minimum=1, maximum=1024)
    memory_mb: int = setting(1024, minimum=1, maximum=65_536)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_mb) << 20


class ChannelOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`ChannelSettings`, e.g. ``analyze_channels(model, layer='features.4', k=4)``: its
    fields (nested ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    layer: str | None
    axes: AxisSettings
    k: int
    shrinkage: float
    ridge: float
    n_triplets: int
    permutations: int
    bootstrap: int
    seed: int
    lesion_kinds: tuple[str, ...] | list[str]
    cluster_k: int
    cluster_seeds: int
    relevance_bins: int
    init_seed: int
    init_seeds: int
    init_recalibrate: bool
    pruning: PruningSettings | None
    batch_size: int
    memory_mb: int


@dataclass(frozen=True)
class ChannelDataSettings(Settings):
    """The labelled images of a channel analysis (:func:`fl_core.channelaxes.calibration.channel_data`).

    Attributes:
        source: 'crops' (the bundled labelled crops, offline), a labelled ImageFolder tree (ImageNet val layout:
            class index = sorted wnid), or CIFAR in torchvision's format (cifar10:PATH, cifar100:PATH: the test split;
            PATH@train: the training split); from Python also labelled images a script holds (checked where they are
            read: :func:`fl_core.arguments.as_images`).
        n_calibration: calibration images (statistics, fine-tune): one pass of statistics.
        n_evaluation: held-out images (lesions, pruning): every channel's lesioned networks run on each, so by default
            the smaller set (the Channel Axes page's first view).
        seed: seed of the data split and every random choice.
    """

    source: str = setting(CROPS, flag="data")
    n_calibration: int = setting(256, minimum=8, maximum=MAX_IMAGES, flag="calibration")
    n_evaluation: int = setting(64, minimum=8, maximum=MAX_IMAGES, flag="evaluation")
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)
