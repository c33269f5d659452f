"""The claim-5 gradients of a layer's filters (fl_core.channelaxes.gradients) against independent computations:
autograd of the whole-batch formulas on a tiny float64 network, finite differences of the project's own input-capture
estimator, and resampled images against the images repeated explicitly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fl_core.channelaxes.analysis import layers_axes
from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.gradients import gradient_pieces
from fl_core.channelaxes.site import locate_site
from fl_core.channelaxes.training import analysis_data, training_axes_settings

DEVICE = torch.device("cpu")


class TinyNet(nn.Module):
    """conv (3→6, stride and groups as asked) → BN (eval, planted statistics) → ReLU → conv (6→4) → pool → linear."""

    def __init__(self, groups: int = 1, stride: int = 1) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.conv = nn.Conv2d(3 * (groups > 1) + 3, 6, 3, stride=stride, padding=1, groups=groups)
        self.bn = nn.BatchNorm2d(6)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(6, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(0.0, 0.5)
        self.double().eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.conv2(self.relu(self.bn(self.conv(x))))).mean((2, 3)))


def tiny_world(groups: int = 1, stride: int = 1, n: int = 40) -> tuple[TinyNet, LabelledInputs]:
    net = TinyNet(groups, stride)
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(n, net.conv.in_channels, 8, 8, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=generator)
    return net, LabelledInputs(x=x, y=y)


def whole_batch_quantities(net: TinyNet, weight: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                           margin: torch.Tensor) -> dict[str, torch.Tensor]:
    """Mean cross-entropy, Σ_i I_X(i) and Σ_i I_G(ā_i; m) as functions of the conv weight, written out from their
    definitions: explicit im2col for Σ_X, the network run with ``weight`` in place, m fixed."""
    conv = net.conv
    activation = {}
    hook = net.relu.register_forward_hook(lambda m, a, out: activation.__setitem__("a", out.clone()))
    logits = functional_call(net, {"conv.weight": weight}, (x,))
    hook.remove()
    groups, per_group = conv.groups, conv.in_channels // conv.groups
    patches = F.unfold(F.pad(x, (1, 1, 1, 1)), 3, stride=conv.stride)  # (N, C_in·9, L)
    columns = patches.transpose(1, 2).reshape(-1, patches.shape[1])
    centred = columns - columns.mean(0)
    sigma = centred.T @ centred / len(columns)  # Σ_X over every patch of every image
    w = weight.flatten(1)
    capture = []
    for i in range(conv.out_channels):
        g = i // (conv.out_channels // groups)
        block = sigma[g * per_group * 9:(g + 1) * per_group * 9, g * per_group * 9:(g + 1) * per_group * 9]
        capture.append(w[i] @ block @ w[i] / (w[i] @ w[i]))
    traces = torch.stack([sigma[g * per_group * 9:(g + 1) * per_group * 9].diagonal(g * per_group * 9).sum()
                          for g in range(groups)])
    total_capture = torch.stack(capture).sum() * w.shape[1] / traces.mean()
    pooled = activation["a"].mean((2, 3))
    a = pooled - pooled.mean(0)
    m = margin - margin.mean()
    r = (a * m[:, None]).mean(0) / (a.square().mean(0).sqrt() * m.square().mean().sqrt())
    return {"update": -F.cross_entropy(logits, y), "capture": total_capture,
            "information": (-0.5 * torch.log1p(-r ** 2)).sum()}


@pytest.mark.slow
@pytest.mark.parametrize("groups,stride", [(1, 1), (2, 2)])
def test_gradients_equal_autograd_of_the_whole_batch_definitions(groups: int, stride: int) -> None:
    net, inputs = tiny_world(groups, stride)
    x, y = inputs.head(len(inputs))
    site = locate_site(net, "conv", x[:1])
    pieces = gradient_pieces(net, site, inputs, device=DEVICE, batch_size=16)
    computed = pieces.gradients(np.ones((1, len(inputs))))
    weight = net.conv.weight.detach().clone().requires_grad_(True)
    margin = torch.as_tensor(pieces.margin)
    for name, value in whole_batch_quantities(net, weight, x, y, margin).items():
        expected, = torch.autograd.grad(value, weight, retain_graph=True)
        np.testing.assert_allclose(computed[name][0], expected.flatten(1).numpy(), rtol=1e-7, atol=1e-10,
                                   err_msg=name)


def test_the_capture_gradient_is_the_derivative_of_the_projects_own_input_capture_column() -> None:
    """Finite differences of Σ_i ``input_capture`` as the Channel Axes statistics pass measures it."""
    net, inputs = tiny_world()
    data = analysis_data(*inputs.head(len(inputs)), classes=("a", "b", "c"), description="noise")
    settings = training_axes_settings(0)
    site = locate_site(net, "conv", inputs.head(1)[0])
    gradient = gradient_pieces(net, site, inputs, device=DEVICE).gradients(np.ones((1, len(inputs))))["capture"][0]
    direction = torch.randn(net.conv.weight.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    eps = 1e-5

    def total_capture(shift: float) -> float:
        moved = TinyNet()
        moved.load_state_dict(net.state_dict())
        with torch.no_grad():
            moved.conv.weight += shift * direction
        return float(layers_axes(moved, ["conv"], data, settings, DEVICE, None)[0].table["input_capture"].sum())

    numeric = (total_capture(eps) - total_capture(-eps)) / (2 * eps)
    assert numeric == pytest.approx(float((gradient * direction.flatten(1).numpy()).sum()), rel=1e-5)


def test_resampled_gradients_equal_those_of_the_images_repeated_explicitly() -> None:
    net, inputs = tiny_world()
    x, y = inputs.head(len(inputs))
    site = locate_site(net, "conv", x[:1])
    counts = np.random.default_rng(0).multinomial(len(x), np.full(len(x), 1 / len(x)))
    resampled = gradient_pieces(net, site, inputs, device=DEVICE).gradients(counts[None].astype(float))
    index = torch.from_numpy(np.repeat(np.arange(len(x)), counts))
    repeated = gradient_pieces(net, site, LabelledInputs(x=x[index], y=y[index]), device=DEVICE)
    for name, value in repeated.gradients(np.ones((1, len(index)))).items():
        np.testing.assert_allclose(resampled[name], value, rtol=1e-8, atol=1e-12, err_msg=name)


def test_cosines_are_one_for_a_gradient_with_itself_and_nan_for_a_zero_gradient() -> None:
    net, inputs = tiny_world()
    site = locate_site(net, "conv", inputs.head(1)[0])
    pieces = gradient_pieces(net, site, inputs, device=DEVICE)
    ones = np.ones((1, len(inputs)))
    gradients = pieces.gradients(ones)
    capture = gradients["capture"].reshape(-1)
    update = gradients["update"].reshape(-1)
    expected = update @ capture / (np.linalg.norm(update) * np.linalg.norm(capture))
    assert pieces.cosines(ones)["cos_update_capture"][0] == pytest.approx(expected)
    assert -1 <= expected <= 1
    import dataclasses

    flat = dataclasses.replace(pieces, loss=np.zeros_like(pieces.loss))
    assert np.isnan(flat.cosines(ones)["cos_update_information"][0])
