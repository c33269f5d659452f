"""Small CNNs for the demo checkpoints and the Training Lab (CIFAR-style 32×32 inputs).

Architectures are configs as data: :data:`NETS` maps a name to a builder, and :func:`build_net` is the one
constructor used by the manifest (``demo:NAME``), the trainer and the tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from torch import nn


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int = 1, padding: int | None = None
                  ) -> list[nn.Module]:
    padding = kernel // 2 if padding is None else padding
    return [nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, bias=False),
            nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]


class SmallVGG(nn.Module):
    """VGG-like: ``conv(k1)-BN-ReLU`` then stages of 3×3 convs with max-pooling, global average pool, linear.

    Args:
        num_classes: outputs.
        widths: channels per stage; ``widths[0]`` is the first-layer width (number of first-layer filters).
        first_kernel: first-layer kernel size (3, 5 or 7).
        in_channels: input channels (3 for RGB).
        first_stride: first-layer stride (= ``first_kernel`` with ``first_padding=0``: non-overlapping tiles).
        first_padding: first-layer padding (default ``first_kernel // 2``).
    """

    def __init__(self, num_classes: int = 10, widths: Sequence[int] = (32, 64, 128), first_kernel: int = 3,
                 in_channels: int = 3, first_stride: int = 1, first_padding: int | None = None) -> None:
        super().__init__()
        layers: list[nn.Module] = _conv_bn_relu(in_channels, widths[0], first_kernel, first_stride, first_padding)
        for c_in, c_out in itertools.pairwise(widths):
            layers += [nn.MaxPool2d(2), *_conv_bn_relu(c_in, c_out, 3), *_conv_bn_relu(c_out, c_out, 3)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


class BasicBlock(nn.Module):
    """Residual block: two 3×3 conv-BN with a 1×1 projection shortcut when the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = (nn.Identity() if stride == 1 and c_in == c_out else
                         nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class SmallResNet(nn.Module):
    """ResNet-like: a ``conv(k1)`` stem then one :class:`BasicBlock` per stage (stride 2 between stages).

    Arguments as :class:`SmallVGG`.
    """

    def __init__(self, num_classes: int = 10, widths: Sequence[int] = (32, 64, 128), first_kernel: int = 3,
                 in_channels: int = 3, first_stride: int = 1, first_padding: int | None = None) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn_relu(in_channels, widths[0], first_kernel, first_stride, first_padding))
        blocks = [BasicBlock(widths[0], widths[0], 1)]
        blocks += [BasicBlock(c_in, c_out, 2) for c_in, c_out in itertools.pairwise(widths)]
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))


NETS: dict[str, Callable[..., nn.Module]] = {"small_vgg": SmallVGG, "small_resnet": SmallResNet}


def build_net(arch: str, **kwargs) -> nn.Module:
    """Construct a FilterLens small net by name (``small_vgg``, ``small_resnet``)."""
    if arch not in NETS:
        raise KeyError(f"unknown FilterLens architecture '{arch}'; known: {', '.join(NETS)}")
    if "widths" in kwargs:
        kwargs["widths"] = tuple(kwargs["widths"])
    return NETS[arch](**kwargs)
