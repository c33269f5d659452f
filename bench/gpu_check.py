"""GPU proof: the same small analyses on CPU and on CUDA, compared within stated tolerances.

Each check calls fl_core's public functions with ``device="cpu"`` and then ``device="cuda"`` on the same inputs:

* ``energy`` — patch PCA (float64 accumulation on the device) and energy profiles of the demo model's 3×3 first layer
  and a random-init ``timm:resnet18``'s 7×7 one (147-D patches), on the bundled photos;
* ``whitening`` — C(δ)/C(0) from the float64 FFT input autocorrelation, on the bundled photos;
* ``channels`` — one Channel Axes run on the demo model (layer statistics, a batched lesion and a pruning point under
  autocast), on the bundled labelled crops;
* ``masterkeys`` — Lloyd iterations of the |cos| clustering from the same seeds on either device, and the whole
  :func:`~fl_core.masterkeys.clustering.analyze_master_keys` (whose k-means++ draws come from a generator on the
  device);
* ``rescore`` — the original model and one method-B swap of every depthwise layer, scored under bf16/fp16 autocast:
  the real MobileNetV2 on the ImageNet sample when the fixtures are there, else a random-init ConvNeXt-atto on the
  bundled photos (agreement with the original only).

It prints one row per compared quantity (max |CPU − CUDA| against its tolerance and the reason for it) and each
check's seconds on both devices with the CPU/CUDA speed ratio, and exits 1 when anything disagrees or fails on one
device. On a machine without CUDA it runs the CPU half, says so and exits 0.

Run on a GPU machine from the repository root (docs/DEVELOPING.md): ``python bench/gpu_check.py``;
``--against cpu`` compares the CPU with itself (a self-test of the comparison: every gap is 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fl_core.channelaxes.analysis import ChannelSettings, analyze_channels  # noqa: E402
from fl_core.channelaxes.calibration import channel_data  # noqa: E402
from fl_core.channelaxes.interventions import LESION_KINDS  # noqa: E402
from fl_core.channelaxes.pruning import PruningSettings  # noqa: E402
from fl_core.compute.device import product_dtype  # noqa: E402
from fl_core.firstlayer.energy import EnergySettings, analyze_energy  # noqa: E402
from fl_core.firstlayer.whitening import WhiteningSettings, analyze_whitening  # noqa: E402
from fl_core.io.images import bundled_images, folder_images  # noqa: E402
from fl_core.io.models import load_model  # noqa: E402
from fl_core.masterkeys.clustering import analyze_master_keys  # noqa: E402
from fl_core.masterkeys.depthwise import depthwise_bank  # noqa: E402
from fl_core.masterkeys.kmeans import centred_unit_vectors, kmeans_plus_plus, lloyd_abs_cosine  # noqa: E402
from fl_core.masterkeys.rescore import analyze_rescore  # noqa: E402
from fl_core.masterkeys.swap import swap_filters  # noqa: E402

DEFAULT_FIXTURES = Path(os.environ.get("FL_FIXTURES", REPO.parent / "shared" / "fixtures"))
FLOAT64 = "float64 statistics on both devices"
TF32 = "float32 convolutions (TF32 on CUDA) feed float64 statistics"
AUTOCAST = "bf16/fp16 autocast on CUDA, float32 on CPU"


@dataclass(frozen=True)
class Quantity:
    """One compared number or array: agreement means max |cpu − cuda| ≤ tolerance (relative: / max(max |cpu|,
    floor), so a quantity that is ~0 on the CPU is compared against the noise ``floor`` of its computation)."""

    name: str
    tolerance: float
    why: str
    relative: bool = False
    floor: float = 1e-300

    def difference(self, cpu: np.ndarray, cuda: np.ndarray) -> float:
        cpu, cuda = np.asarray(cpu, dtype=np.float64), np.asarray(cuda, dtype=np.float64)
        if cpu.shape != cuda.shape:
            return float("inf")
        gap = float(np.max(np.abs(cpu - cuda))) if cpu.size else 0.0
        return gap / max(float(np.max(np.abs(cpu))), self.floor) if self.relative else gap


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[str], dict[str, np.ndarray]]
    quantities: tuple[Quantity, ...]


class Inputs:
    """The models and images every check uses, loaded once (the same objects for both devices)."""

    def __init__(self, fixtures: Path, n_images: int) -> None:
        self.photos = bundled_images()
        self.demo = load_model("demo:tiny_vgg")
        self.resnet18 = load_model("timm:resnet18")
        self.convnext = load_model("timm:convnext_atto")
        self.crops = channel_data(self.demo, "crops", 64, 64, seed=0)
        mobilenet = fixtures / "checkpoints" / "mobilenet_v2_imagenet.pt"
        sample = fixtures / "imagenet-sample"
        if mobilenet.is_file() and sample.is_dir():
            self.scored = load_model(f"torchvision:mobilenet_v2={mobilenet}",
                                     input_overrides={"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)})
            self.scored_images, self.labelled = folder_images(sample, limit=n_images), True
        else:
            self.scored, self.scored_images, self.labelled = self.convnext, self.photos, False
        self.swap = swap_filters(depthwise_bank(self.scored), "B")


def energy_values(inputs: Inputs, device: str) -> dict[str, np.ndarray]:
    result = analyze_energy([inputs.demo, inputs.resnet18], inputs.photos, EnergySettings(seeds=3), device=device)
    return {"λ_i / λ_1": np.concatenate([m.lambdas / m.lambdas[0] for m in result.models]),
            "profiles e_i": np.concatenate([m.profile for m in result.models]),
            "theory r": np.array([m.theory.r for m in result.models]),
            "r on log values (trained demo)": np.array([result.models[0].theory.r_log])}


def whitening_values(inputs: Inputs, device: str) -> dict[str, np.ndarray]:
    result = analyze_whitening([inputs.demo], inputs.photos, WhiteningSettings(max_distance=10, seeds=3), device=device)
    return {"C(δ)/C(0), every curve": np.stack([np.asarray(c) for c in result.curves.values()])}


def channel_values(inputs: Inputs, device: str) -> dict[str, np.ndarray]:
    settings = ChannelSettings(layer="features.4", lesion_kinds=LESION_KINDS[:1],
                               pruning=PruningSettings(criteria=("l1",), fractions=(0.5,), finetune_steps=0))
    result = analyze_channels(inputs.demo, inputs.crops, settings, device=device)
    table = result.table
    return {"input capture, peer R²": table[["input_capture", "peer_r2"]].to_numpy(),
            "task information (nats)": table["task_info"].to_numpy(),
            "mean-lesion Δloss": table["lesion_dloss"].to_numpy(),
            "Spearman ρ(local, task)": np.array([result.axes.spearman]),
            "pruned accuracy at 50%": np.asarray(result.pruning.curves["l1"].accuracy)}


def masterkey_values(inputs: Inputs, device: str) -> dict[str, np.ndarray]:
    bank = depthwise_bank(inputs.convnext)
    filters, _ = bank.filters(bank.select(7))
    units = centred_unit_vectors(torch.as_tensor(filters, dtype=torch.float32))
    seeds = kmeans_plus_plus(units, 8, 16, torch.Generator().manual_seed(0))  # drawn on CPU: the same on both
    centroids, _ = lloyd_abs_cosine(units.to(device), seeds.to(device))
    fitted = (units.to(device) @ centroids.transpose(1, 2)).abs().amax(dim=-1).mean(dim=1)
    full = analyze_master_keys(inputs.convnext, device=device)
    return {"Lloyd |cos| objective per restart": fitted.cpu().numpy(),
            "analyze_master_keys objective": np.array([full.objective]),
            "published-key counts": np.asarray(full.published_assignment.counts)}


def rescore_values(inputs: Inputs, device: str) -> dict[str, np.ndarray]:
    result = analyze_rescore(inputs.scored, inputs.scored_images, swaps=[inputs.swap], device=device, batch_size=32)
    swap = result.swaps[0]
    values = {"swap agreement with the original": np.array([swap.agreement]),
              "swap KL(original ‖ swap) (nats)": np.array([swap.kl])}
    if inputs.labelled:
        values["top-1, top-5 (original, swap)"] = np.array([result.top1, result.top5, swap.top1, swap.top5])
        values["loss (original, swap)"] = np.array([result.loss, swap.loss])
    return values


def energy_tolerances(device: str | None) -> tuple[float, float, str]:
    """(λ relative, e_i) tolerances and why: float64 Gram products where the device has fast float64, else float32
    products summed in float64 (:func:`fl_core.compute.device.product_dtype`; λ within ~2e-3 measured in
    test_patches)."""
    if device is None or product_dtype(torch.device(device)) == torch.float64:
        return 1e-8, 1e-8, FLOAT64
    return 5e-3, 0.05, "float32 Gram products summed in float64 on this GPU (backend.product_dtype)"


def checks(inputs: Inputs, other: str | None) -> list[Check]:
    one_image = 1.0 / len(inputs.scored_images)
    lam, profile, why = energy_tolerances(other)
    return [
        Check("energy", lambda d: energy_values(inputs, d), (
            Quantity("λ_i / λ_1", lam, why, True), Quantity("profiles e_i", profile, why),
            Quantity("theory r", max(1e-6, profile), why + " (then the same CPU fit)"),
            Quantity("r on log values (trained demo)", max(1e-6, profile),
                     "at the fitted τ (a random bank's near-tied τ would move its r_log)"))),
        Check("whitening", lambda d: whitening_values(inputs, d), (
            Quantity("C(δ)/C(0), every curve", 1e-8, "float64 FFT autocorrelation on both devices"),)),
        Check("channels", lambda d: channel_values(inputs, d), (
            Quantity("input capture, peer R²", 5e-3, TF32, True),
            Quantity("task information (nats)", 0.05, TF32, True),
            Quantity("mean-lesion Δloss", 0.02, AUTOCAST),
            Quantity("Spearman ρ(local, task)", 0.05, "ranks of the quantities above"),
            Quantity("pruned accuracy at 50%", 2 / 64 + 1e-9, AUTOCAST + ": at most 2 of 64 images flip"))),
        Check("masterkeys", lambda d: masterkey_values(inputs, d), (
            Quantity("Lloyd |cos| objective per restart", 1e-4, "float32 Lloyd iterations, same seeds"),
            Quantity("analyze_master_keys objective", 0.01,
                     "k-means++ draws from a generator on the device: other restarts, same optimum ±1%", True),
            Quantity("published-key counts", 0, "assignment to the 8 published keys does not depend on the device"))),
        Check("rescore", lambda d: rescore_values(inputs, d), (
            Quantity("swap agreement with the original", 3 * one_image + 1e-9, AUTOCAST + ": ≤ 3 images flip"),
            Quantity("swap KL(original ‖ swap) (nats)", 0.05, AUTOCAST + "; relative to ≥ 1e-3 nats: a swap that "
                     "changes nothing (KL 3e-14 on CPU) reads 1e-7 under bf16 on either device", True, floor=1e-3),
            Quantity("top-1, top-5 (original, swap)", 3 * one_image + 1e-9, AUTOCAST + ": ≤ 3 images flip"),
            Quantity("loss (original, swap)", 0.03, AUTOCAST + " (bf16 autocast on CPU moved it 1.1%)", True))),
    ]


def timed(run: Callable[[str], dict[str, np.ndarray]], device: str) -> tuple[dict | None, float, str]:
    """(values, seconds, error line) of one check on one device; CUDA work is synchronised before the clock stops."""
    start = time.perf_counter()
    try:
        values = run(device)
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        return values, time.perf_counter() - start, ""
    except Exception as exc:  # a failing check is reported in the table, the others still run
        traceback.print_exc(file=sys.stderr)
        return None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"


def warm_up_cuda(device: str) -> None:
    """Create the CUDA context and cuDNN handles before any check is timed."""
    x = torch.randn(8, 3, 64, 64, device=device)
    torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3, device=device)).sum().item()
    torch.cuda.synchronize(device)


@dataclass
class Outcome:
    """One check on both devices: seconds, errors and per-quantity (name, gap, ok) rows."""

    name: str
    cpu_seconds: float
    other_seconds: float | None
    errors: list[str]
    rows: list[tuple[Quantity, float, bool]]

    @property
    def failures(self) -> int:
        return len(self.errors) + sum(not ok for _, _, ok in self.rows)

    @property
    def speed_ratio(self) -> str:
        return "—" if self.errors or not self.other_seconds else f"{self.cpu_seconds / self.other_seconds:.1f}×"


def run_check(check: Check, other: str | None) -> Outcome:
    """Run ``check`` on CPU and on the ``other`` device (if any), print its values or the comparison."""
    cpu, cpu_s, cpu_error = timed(check.run, "cpu")
    gpu, gpu_s, gpu_error = timed(check.run, other) if other else (None, None, "")
    errors = [f"{where}: {e}" for e, where in ((cpu_error, "CPU"), (gpu_error, other)) if e]
    outcome = Outcome(check.name, cpu_s, gpu_s, errors, [])
    timing = f"CPU {cpu_s:.1f} s" + (f", {other} {gpu_s:.1f} s, speed ratio {outcome.speed_ratio}" if other else "")
    print(f"\n{check.name}: {timing}")
    for error in outcome.errors:
        print(f"  ERROR on {error}")
    if cpu is None or (other and gpu is None):
        return outcome
    for quantity in (q for q in check.quantities if q.name in cpu):
        if not other:
            print(f"  {quantity.name:36s} CPU {np.array2string(np.ravel(cpu[quantity.name])[:4], precision=4)}")
            continue
        gap = quantity.difference(cpu[quantity.name], gpu[quantity.name])
        outcome.rows.append((quantity, gap, gap <= quantity.tolerance))
        relative = "relative " if quantity.relative else ""
        print(f"  {'ok  ' if gap <= quantity.tolerance else 'FAIL'} {quantity.name:36s} max {relative}|Δ| "
              f"{gap:.3g} ≤ {quantity.tolerance:.3g}  ({quantity.why})")
    return outcome


def print_summary(outcomes: list[Outcome], other: str | None, seconds: float) -> None:
    print(f"\n{'check':12s} {'CPU s':>7s} {'GPU s':>7s} {'CPU/GPU':>9s}  agreeing  errors")
    for o in outcomes:
        gpu = f"{o.other_seconds:7.1f}" if o.other_seconds is not None else f"{'—':>7s}"
        agreeing = f"{sum(ok for *_, ok in o.rows)}/{len(o.rows)}" if other else "—"
        print(f"{o.name:12s} {o.cpu_seconds:7.1f} {gpu} {o.speed_ratio:>9s}  {agreeing:>8s}  {len(o.errors)}")
    if not other:
        print(f"\nCUDA is not available on this machine: ran the CPU half only ({seconds:.0f} s in all). Run this "
              "script on a GPU machine to compare the devices (docs/DEVELOPING.md).")
    else:
        failures = sum(o.failures for o in outcomes)
        print(f"\n{'all agree' if not failures else f'{failures} disagreement(s) or error(s)'}; {seconds:.0f} s in all")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES, help="the shared fixtures folder")
    parser.add_argument("--images", type=int, default=128, help="ImageNet-sample images for the re-score")
    parser.add_argument("--against", default="cuda",
                        help="the device compared with the CPU (cuda, cuda:N; cpu: a self-test of this script)")
    args = parser.parse_args()
    started = time.perf_counter()
    cuda = torch.cuda.is_available()
    other = args.against if cuda or not args.against.startswith("cuda") else None
    inputs = Inputs(args.fixtures, args.images)
    kind = "labelled ImageNet-sample" if inputs.labelled else "bundled"
    print(f"torch {torch.__version__}; CUDA: {torch.cuda.get_device_name(0) if cuda else 'not available'}; "
          f"cuDNN TF32 {torch.backends.cudnn.allow_tf32}, matmul TF32 {torch.backends.cuda.matmul.allow_tf32}; "
          f"re-score: {inputs.scored.label} on {len(inputs.scored_images)} {kind} images; inputs loaded in "
          f"{time.perf_counter() - started:.1f} s")
    if other and other.startswith("cuda"):
        warm_up_cuda(other)
    outcomes = [run_check(check, other) for check in checks(inputs, other)]
    print_summary(outcomes, other, time.perf_counter() - started)
    return 1 if sum(o.failures for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
