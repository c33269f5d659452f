"""Per-layer sweep: how much of a network is theory, one depthwise layer at a time.

For each depthwise layer alone, its filters are swapped by one replacement (default method B) and, as the lesion
control, zeroed (:data:`fl_core.masterkeys.swap.REPLACEMENTS` ``zero``). The original and all these variants are scored
on the same decoded images by :func:`fl_core.masterkeys.rescore.rescore` (after recovery on a calibration split when
asked, every score then on the held-out rest).

*Theory share* [proposed]: 1 − KL(p_original ‖ p_swapped) / KL(p_original ‖ p_zeroed), the part of what the layer
does to the network's output that its idealized models reproduce: 1 when swapping the layer changes nothing, 0 when
it changes as much as deleting the layer's filters (negative: more); ``None`` when zeroing the layer changes nothing.
KL needs no labels and is smooth where top-1 on a few hundred images is coarse.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import pandas as pd

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_model, as_settings
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import ProgressLike, progress_callback
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.recovery import RecoveryInfo
from fl_core.masterkeys.rescore import VariantScore, analyze_rescore
from fl_core.masterkeys.settings import LayerSweepOverrides, LayerSweepSettings, RescoreSettings, ScoringSettings
from fl_core.masterkeys.swap import swap_filters
from fl_core.results import Result, with_model_columns

ZERO = "zero"

if TYPE_CHECKING:
    from typing_extensions import Unpack


def theory_share(swapped_kl: float, zeroed_kl: float) -> float | None:
    """1 − KL_swapped / KL_zeroed (module docstring); ``None`` when KL_zeroed is 0."""
    return 1.0 - swapped_kl / zeroed_kl if zeroed_kl > 0 else None


@dataclass(frozen=True)
class LayerSweepRow(Result):
    """One depthwise layer swapped alone, and zeroed alone.

    Attributes:
        layer, stage, n_filters: the layer.
        relative_error: ‖W − Ŵ‖/‖W‖ of its swap.
        swapped, zeroed: scores of the network with only this layer swapped / zeroed (with ``recovered`` scores
            when recovery ran).
        theory_share: module docstring, from the unrecovered variants.
        recovered_theory_share: the same from the recovered variants (``None`` without recovery).
    """

    layer: str
    stage: int
    n_filters: int
    relative_error: float
    swapped: VariantScore
    zeroed: VariantScore
    theory_share: float | None
    recovered_theory_share: float | None


@dataclass(frozen=True)
class LayerSweepResult(Result):
    """The per-layer sweep of one replacement; ``to_dict()`` is the ``rescore --sweep`` CLI JSON.

    Attributes:
        spec, label: the model.
        replacement: what each layer was swapped for.
        images: description of the image source.
        n_images, top1, top5, loss: the original's scores on the scored (held-out) images.
        rows: one per depthwise layer, in forward order.
        recovery: the recovery protocol and split, when recovery ran.
        seconds: wall time of the scoring.
        device: where it ran.
    """

    spec: str
    label: str
    replacement: str
    images: str
    n_images: int
    top1: float | None
    top5: float | None
    loss: float | None
    rows: tuple[LayerSweepRow, ...]
    recovery: RecoveryInfo | None
    seconds: float
    device: str

    _figures: ClassVar[dict[str, str]] = {"layers": "fl_core.masterkeys.plots:layer_sweep_figure"}

    def to_frame(self) -> pd.DataFrame:
        """One row per depthwise layer: the model's label and spec, the layer, then ``swapped_*`` and ``zeroed_*``
        scores (``*_recovered_*`` after recovery) and the theory shares."""
        records = []
        for row in self.rows:
            record = {key: value for key, value in row.to_dict().items() if key not in ("swapped", "zeroed")}
            for kind in ("swapped", "zeroed"):
                scores = getattr(row, kind).row()
                record.update({f"{kind}_{key}": value for key, value in scores.items()
                               if key not in ("method", "n_images", "relative_error")})
            records.append(record)
        return with_model_columns(pd.DataFrame(records), self.label, self.spec)


def sweep_layers(model: ModelLike, data: ImagesLike | None = None, settings: LayerSweepSettings | None = None, *,
                 device: DeviceLike = None, progress: ProgressLike = None,
                 **setting_overrides: Unpack[LayerSweepOverrides]) -> LayerSweepResult:
    """Swap, and zero, each chosen depthwise layer alone and score them all together (module docstring).

    Args:
        model: a full model (spec string, :class:`LoadedModel` or ``nn.Module``; never changed).
        data: the images (an ImageFolder tree for accuracy; default: the bundled photos).
        settings: the replacement, which layers / stages, recovery (twice as many recoveries as layers), k and seed
            of ``centroid`` / ``random`` replacements, batching; ``setting_overrides`` replace fields.
        **setting_overrides: fields of ``settings`` to replace, by name.
        device: as in :func:`fl_core.masterkeys.rescore.analyze_rescore`.
        progress: ``progress(fraction, message)`` (each layer's variants run from that layer's block on).
    """
    settings = as_settings(LayerSweepSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    images = as_images(data)  # a missing folder is refused before the model loads
    loaded = as_model(model, progress=progress)
    bank = depthwise_bank(loaded)
    chosen = bank.chosen(settings.layers, settings.stages)
    swaps = [swap for layer in chosen for swap in (
        swap_filters(bank, settings.replacement, layers=[layer.name], k=settings.k, seed=settings.seed, device=device),
        swap_filters(bank, ZERO, layers=[layer.name]))]
    scoring = {f.name: getattr(settings, f.name) for f in dataclasses.fields(ScoringSettings)}
    result = analyze_rescore(loaded, images, RescoreSettings(**scoring), swaps=swaps, device=device, progress=progress)
    rows = []
    for i, layer in enumerate(chosen):
        swapped, zeroed = result.swaps[2 * i], result.swaps[2 * i + 1]
        recovered = swapped.recovered is not None and zeroed.recovered is not None
        rows.append(LayerSweepRow(
            layer=layer.name, stage=layer.stage, n_filters=layer.n_filters,
            relative_error=swaps[2 * i].relative_error, swapped=swapped, zeroed=zeroed,
            theory_share=theory_share(swapped.kl, zeroed.kl),
            recovered_theory_share=theory_share(swapped.recovered.kl, zeroed.recovered.kl) if recovered else None))
    return LayerSweepResult(spec=loaded.spec, label=loaded.label, replacement=settings.replacement,
                            images=result.images, n_images=result.n_images, top1=result.top1, top5=result.top5,
                            loss=result.loss, rows=tuple(rows), recovery=result.recovery, seconds=result.seconds,
                            device=result.device)
