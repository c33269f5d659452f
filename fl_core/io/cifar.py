"""CIFAR ResNets (He et al. 2016, section 4.2): the ``cifar:resnet20|32|44|56|110`` architectures, the checkpoint
layouts they are published in, and the preprocessing of each family.

The network, for depth 6n + 2: a 3×3 convolution from 3 to 16 channels with BatchNorm and ReLU; three stages of n
basic blocks at 16, 32 and 64 channels (32×32, 16×16, 8×8 for a 32-pixel input), the first block of stages 2 and 3
with stride 2; global average pooling and a linear classifier. A basic block is ``conv3×3-BN-ReLU-conv3×3-BN``, plus
its shortcut, then ReLU. Where a block changes shape the shortcut is

* option **A** (the paper's CIFAR networks; no parameters): every second row and column of the input, zero-padded
  with (C_out − C_in)/2 channels in front and behind;
* option **B** (a 1×1 convolution with stride 2 and BatchNorm), as some published checkpoints use.

Checkpoint layouts (:func:`read_cifar_layout`): the block and stem names are those above (``conv1``, ``bn1``,
``layer{1,2,3}.{j}.{conv1,bn1,conv2,bn2}``) in every common layout; the classifier is ``linear`` or ``fc`` and an
option-B shortcut ``shortcut.0/1`` or ``downsample.0/1``. They are mapped onto this module's names (``fc``,
``shortcut``), and the family decides the preprocessing (:data:`FAMILIES`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from fl_core.errors import CheckpointError, ModelSpecError
from fl_core.io.preprocessing import IMAGENET_MEAN, IMAGENET_STD, InputConfig

CIFAR_BLOCKS = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18, "resnet1202": 200}
"""Blocks per stage of the paper's architectures (depth = 6 × blocks + 2); any ``resnet{6n+2}`` up to n = 200 is
accepted."""
MAX_BLOCKS = 200
NAME = re.compile(r"resnet([0-9]{2,4})")
STAGE_WIDTHS = (16, 32, 64)
CIFAR_INPUT_SIZE = 32
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2009, 0.1984, 0.2023)


@dataclass(frozen=True)
class CifarFamily:
    """A published family of CIFAR ResNet checkpoints: how it names its weights and how it normalized images."""

    name: str
    description: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


FAMILIES = {
    "akamaster": CifarFamily("akamaster", "akamaster/pytorch_resnet_cifar10 ('linear' classifier, option-A "
                             "shortcuts), trained with ImageNet's mean and std", IMAGENET_MEAN, IMAGENET_STD),
    "chenyaofo-cifar10": CifarFamily("chenyaofo-cifar10", "chenyaofo/pytorch-cifar-models ('fc' classifier, "
                                     "option-B 'downsample' shortcuts), trained with CIFAR-10's mean and std",
                                     CIFAR10_MEAN, CIFAR10_STD),
    "chenyaofo-cifar100": CifarFamily("chenyaofo-cifar100", "chenyaofo/pytorch-cifar-models, CIFAR-100 ('fc' "
                                      "classifier, option-B 'downsample' shortcuts), trained with CIFAR-100's mean "
                                      "and std", CIFAR100_MEAN, CIFAR100_STD),
}
RANDOM_INIT_FAMILY = FAMILIES["akamaster"]
"""The preprocessing of an architecture without a file: the most common checkpoints' (akamaster's)."""


def cifar_input_config(family: CifarFamily = RANDOM_INIT_FAMILY) -> InputConfig:
    """32×32 input, no crop (``crop_pct`` 1: a 32-pixel image passes unchanged, a larger one is resized on its short
    side and centre-cropped), the family's mean and std."""
    return InputConfig(input_size=CIFAR_INPUT_SIZE, crop_pct=1.0, interpolation="bilinear", mean=family.mean,
                       std=family.std)


class ZeroPadShortcut(nn.Module):
    """Option-A shortcut: ``x[:, :, ::stride, ::stride]`` with (C_out − C_in)/2 zero channels in front and behind.

    Written as input channel ``sources[k]`` landing on output channel ``targets[k]`` (not persistent: no weights), so
    that removing channels (:mod:`fl_core.channelaxes.pruner`) can drop inputs or outputs and keep the others where
    they were.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride
        front = (out_channels - in_channels) // 2
        self.register_buffer("sources", torch.arange(in_channels), persistent=False)
        self.register_buffer("targets", torch.arange(in_channels) + front, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, ::self.stride, ::self.stride]
        out = x.new_zeros((x.shape[0], self.out_channels, *x.shape[2:]))
        return out.index_copy(1, self.targets, x.index_select(1, self.sources))


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)


def _shortcut(in_channels: int, out_channels: int, stride: int, option: str) -> nn.Module:
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    if option == "A":
        return ZeroPadShortcut(in_channels, out_channels, stride)
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                         nn.BatchNorm2d(out_channels))


class CifarBasicBlock(nn.Module):
    """``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, shortcut: str) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = _shortcut(in_channels, out_channels, stride, shortcut)
        self.act2 = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        return self.act2(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """The CIFAR ResNet of depth 6 × ``blocks`` + 2 (module docstring).

    Args:
        blocks: basic blocks per stage (3, 5, 7, 9, 18 for ResNet-20, 32, 44, 56, 110).
        num_classes: classifier outputs.
        shortcut: ``"A"`` (zero padding, no parameters) or ``"B"`` (1×1 convolution and BatchNorm).
    """

    def __init__(self, blocks: int, num_classes: int = 10, shortcut: str = "A") -> None:
        super().__init__()
        self.conv1 = _conv3x3(3, STAGE_WIDTHS[0])
        self.bn1 = nn.BatchNorm2d(STAGE_WIDTHS[0])
        self.act1 = nn.ReLU(inplace=True)
        widths = (STAGE_WIDTHS[0], *STAGE_WIDTHS)
        for stage, (c_in, c_out) in enumerate(itertools.pairwise(widths), start=1):
            stride = 1 if stage == 1 else 2
            self.add_module(f"layer{stage}", nn.Sequential(*(
                CifarBasicBlock(c_in if j == 0 else c_out, c_out, stride if j == 0 else 1, shortcut)
                for j in range(blocks))))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(STAGE_WIDTHS[-1], num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(module.weight)  # He et al. 2015, as the paper initializes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.pool(x).flatten(1))


def check_cifar_name(name: str) -> int:
    """Blocks per stage of ``cifar:resnetD`` (D = 6n + 2, n ≤ :data:`MAX_BLOCKS`); a :class:`ModelSpecError` naming
    the architectures otherwise."""
    match = NAME.fullmatch(name)
    depth = int(match.group(1)) if match else 0
    if depth < 8 or (depth - 2) % 6 or (depth - 2) // 6 > MAX_BLOCKS:
        raise ModelSpecError(f"There is no CIFAR ResNet '{name}'. The cifar: architectures are resnetD with depth "
                             f"D = 6n + 2 (n blocks per stage): {', '.join(CIFAR_BLOCKS)} (He et al. 2016).")
    return (depth - 2) // 6


def cifar_resnet(name: str, num_classes: int = 10, shortcut: str = "A") -> CifarResNet:
    """``cifar:NAME`` at random init (seeded by the caller)."""
    return CifarResNet(check_cifar_name(name), num_classes, shortcut)


# ------------------------------------------------------------------------------------------------ checkpoint layouts

RENAMES = ((re.compile(r"^linear\."), "fc."), (re.compile(r"\.downsample\."), ".shortcut."))
"""Published names → this module's: akamaster's classifier, torchvision-style option-B shortcuts."""
BLOCK_KEY = re.compile(r"^layer([123])\.(\d+)\.conv1\.weight$")


@dataclass(frozen=True)
class CifarLayout:
    """A state dict recognized as a CIFAR ResNet.

    Attributes:
        name: the architecture (``resnet56``), from the blocks per stage.
        blocks: basic blocks per stage.
        tensors: the weights under this module's names.
        num_classes: the classifier's outputs.
        shortcut: ``"A"`` or ``"B"``.
        family: the published family the names and shapes point to (its preprocessing).
        notes: what was renamed.
    """

    name: str
    blocks: int
    tensors: dict[str, torch.Tensor]
    num_classes: int
    shortcut: str
    family: CifarFamily
    notes: tuple[str, ...] = ()


def read_cifar_layout(tensors: Mapping[str, torch.Tensor]) -> CifarLayout | None:
    """The CIFAR ResNet a state dict holds, or ``None`` when it holds none: a 16×3×3×3 ``conv1``, stages
    ``layer1``-``layer3`` with the same number of blocks, and a classifier from 64 features (``linear`` or ``fc``)."""
    renamed = {_canonical(key): value for key, value in tensors.items()}
    stem, head = renamed.get("conv1.weight"), renamed.get("fc.weight")
    if stem is None or tuple(stem.shape) != (STAGE_WIDTHS[0], 3, 3, 3) or head is None or head.dim() != 2:
        return None
    if head.shape[1] != STAGE_WIDTHS[-1]:
        return None
    blocks = {stage: set() for stage in "123"}
    for key in renamed:
        if match := BLOCK_KEY.match(key):
            blocks[match.group(1)].add(int(match.group(2)))
    counts = {len(found) for found in blocks.values()}
    if len(counts) != 1 or not (n := counts.pop()) or any(found != set(range(n)) for found in blocks.values()):
        return None
    name = f"resnet{6 * n + 2}"
    shortcut = "B" if any(".shortcut." in key for key in renamed) else "A"
    notes = tuple(f"renamed '{old}' to '{new}'" for old, new in (("linear.", "fc."), ("downsample.", "shortcut."))
                  if any(old in key for key in tensors))
    return CifarLayout(name, n, renamed, int(head.shape[0]), shortcut, _family(tensors, int(head.shape[0])), notes)


def _canonical(key: str) -> str:
    for pattern, replacement in RENAMES:
        key = pattern.sub(replacement, key)
    return key


def _family(tensors: Mapping[str, torch.Tensor], num_classes: int) -> CifarFamily:
    """chenyaofo's names (``fc`` and ``downsample``) mean its CIFAR-10/100 statistics; anything else akamaster's."""
    chenyaofo = "fc.weight" in tensors and any(".downsample." in key for key in tensors)
    if chenyaofo:
        return FAMILIES["chenyaofo-cifar100" if num_classes == 100 else "chenyaofo-cifar10"]
    return FAMILIES["akamaster"]


def cifar_checkpoint(name: str, tensors: Mapping[str, torch.Tensor], file_name: str) -> CifarLayout:
    """The layout of a file given as ``cifar:NAME=PATH``, checked against ``NAME``.

    Raises:
        CheckpointError: the file is no CIFAR ResNet, or one of another depth (the message names the right spec).
    """
    blocks = check_cifar_name(name)
    layout = read_cifar_layout(tensors)
    if layout is None:
        raise CheckpointError(f"{file_name} is not a CIFAR ResNet: cifar:{name} needs a 16×3×3×3 'conv1', stages "
                              "layer1-layer3 of basic blocks and a 64-feature classifier ('linear' or 'fc'). Name the "
                              "file's own architecture (timm:NAME=PATH, torchvision:NAME=PATH), or use weights:PATH.")
    if layout.blocks != blocks:
        raise CheckpointError(f"{file_name} holds a CIFAR {layout.name} ({layout.blocks} blocks per stage), not a "
                              f"{name} ({blocks}). Use the spec cifar:{layout.name}=PATH.")
    return layout
