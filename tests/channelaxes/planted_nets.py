"""Tiny hand-built networks with planted channel structure, shared by the channel-analysis tests.

``PlantedNet``: conv (3→5, 3×3, zero padding) → ReLU → 1×1 conv (5→2) → global average pool, so the logit
difference is linear in the pooled channels: ``z₁ − z₀ = 2g Σ_c h_c (ā_c − o_c)``. Channel 0 is a box filter on
red, channels 1 and 2 are the *same* box filter on green (an exact duplicate pair), channels 3 and 4 are fixed random
filters on blue.

Two planted worlds:

* **duplicate** (:func:`duplicate_world`): Gaussian-noise images, biases +1 (every ReLU in its linear range), head
  (1, ½, ½, 0, 0); labels are the intact network's own predictions, so it is always right and any change of
  accuracy is the intervention's doing. The green evidence is split over the duplicate pair.
* **alone** (:func:`alone_world`): class 1 images have a red offset, class 0 none; channel 0 is a rectified red
  detector (bias −1), the head reads only it. Channel 0 alone carries the label; the others see label-free noise.
"""

from __future__ import annotations

import torch
from torch import nn

from fl_core.channelaxes.calibration import ChannelData, LabelledInputs
from fl_core.io.models import LoadedModel
from fl_core.io.preprocessing import InputConfig


class PlantedNet(nn.Module):
    def __init__(self, head: tuple[float, ...], bias: tuple[float, ...], offsets: tuple[float, ...],
                 gain: float = 40.0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Conv2d(5, 2, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        generator = torch.Generator().manual_seed(7)
        with torch.no_grad():
            self.conv.weight.zero_()
            self.conv.weight[0, 0] = 1 / 9
            self.conv.weight[1, 1] = 1 / 9
            self.conv.weight[2, 1] = 1 / 9
            self.conv.weight[3:, 2] = torch.randn(2, 3, 3, generator=generator) / 3
            self.conv.bias.copy_(torch.tensor(bias))
            weights = gain * torch.tensor(head)
            self.head.weight.zero_()
            self.head.weight[1, :, 0, 0] = weights
            self.head.weight[0, :, 0, 0] = -weights
            centre = float(weights @ torch.tensor(offsets))
            self.head.bias.copy_(torch.tensor([centre, -centre]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.head(self.relu(self.conv(x)))).flatten(1)


def _loaded(net: PlantedNet) -> LoadedModel:
    net = net.eval().requires_grad_(False)
    return LoadedModel(spec="planted", label="planted", model=net, state_dict=net.state_dict(),
                       input_config=InputConfig(input_size=8, crop_pct=1.0, mean=(0, 0, 0), std=(1, 1, 1)),
                       class_names=("negative", "positive"))


def _split(x: torch.Tensor, y: torch.Tensor, n_calibration: int) -> ChannelData:
    return ChannelData(calibration=LabelledInputs(x=x[:n_calibration], y=y[:n_calibration]),
                       evaluation=LabelledInputs(x=x[n_calibration:], y=y[n_calibration:]),
                       classes=("negative", "positive"), description="planted images", seed=3)


def duplicate_world(n_calibration: int = 400, n_evaluation: int = 300) -> tuple[LoadedModel, ChannelData]:
    """Channels 1 and 2 are exact duplicates that share the green evidence (module docstring)."""
    loaded = _loaded(PlantedNet(head=(1.0, 0.5, 0.5, 0.0, 0.0), bias=(1.0,) * 5, offsets=(1.0,) * 5))
    x = torch.randn(n_calibration + n_evaluation, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y = loaded.model(x).argmax(1)
    return loaded, _split(x, y, n_calibration)


def alone_world(n_calibration: int = 400, n_evaluation: int = 300) -> tuple[LoadedModel, ChannelData]:
    """Channel 0 alone carries the label (module docstring)."""
    loaded = _loaded(PlantedNet(head=(1.0, 0.0, 0.0, 0.0, 0.0), bias=(-1.0, 1.0, 1.0, 1.0, 1.0),
                                offsets=(0.25, 0.0, 0.0, 0.0, 0.0)))
    generator = torch.Generator().manual_seed(4)
    n = n_calibration + n_evaluation
    y = torch.randint(0, 2, (n,), generator=generator)
    x = torch.randn(n, 3, 8, 8, generator=generator)
    x[:, 0] += (y * (1.5 + 1.5 * torch.rand(n, generator=generator)))[:, None, None]
    return loaded, _split(x, y, n_calibration)
