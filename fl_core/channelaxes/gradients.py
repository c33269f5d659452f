"""The gradients behind the paper's claim 5 ("a Gaussian linear analysis explains the separation: the SGD update turns
near-orthogonal to both information gradients after early training", Safaai et al. 2026) for one layer's filters
``W (C, D)`` (docs/methods.md, "The axes over training"; every definition is the project's **proposed** one):

* **the update** ``Δ = −∇_W L``, L the mean cross-entropy over the N analysis images: plain SGD's expected step, up
  to the learning rate (the network in eval mode);
* **total input capture** ``∇_W Σ_i I_X(i)``, ``I_X(i) = (D / tr Σ_X) · w_iᵀΣ_X w_i / ‖w_i‖²`` (the
  ``input_capture`` column). With ``Σ_X w_i = Cov(x, u_i)`` (im2col patches x, conv output u_i):
  ``∂I_X(i)/∂w_i = (D / tr Σ_X) · 2 (Σ_X w_i − R_i w_i) / ‖w_i‖²``, ``R_i`` the Rayleigh quotient (0 for an
  all-zero filter);
* **total task information** ``∇_W Σ_i I(ā_i; m)`` of the Gaussian estimate ``I = −½ log(1 − r_i²)`` (the copula's
  ranks have no gradient), the margin m held at its value (the target, as the Gaussian picture of §8 holds it):
  ``∂I_i/∂ā_{n,i} = r_i/(1 − r_i²) · (1/N) [m̃_n/(s_i s_m) − r_i ã_{n,i}/s_i²]`` (centred values, standard
  deviations over the images), chained to w_i by ``∂ā_{n,i}/∂w_i``: ā_i depends on filter i alone, its BatchNorm
  and activation acting channel by channel.

Each gradient is a sum over images of per-image pieces, kept ``(N, C, D)``, so the cosines of any resample of the
images follow exactly (:meth:`GradientPieces.cosines`, the bootstrap of
:func:`~fl_core.channelaxes.significance.bootstrap`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.information import logit_margin
from fl_core.channelaxes.layerstats import padded_input
from fl_core.channelaxes.site import ChannelSite, on_call

GRADIENTS = ("update", "capture", "information")
"""The three gradients of a layer's filters, in the order of :meth:`GradientPieces.gradients`."""
COSINES = {"cos_update_capture": ("update", "capture"), "cos_update_information": ("update", "information"),
           "cos_capture_information": ("capture", "information")}
"""The cosines reported: the update with each information gradient, and the two information gradients together."""


def image_patches(x: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """``(B, groups, D, L)`` float64: the im2col patches of each image's padded input, per group of the conv
    (``D = C_in/groups · kh · kw`` in the order of ``conv.weight.flatten(1)``, L output positions)."""
    patches = F.unfold(padded_input(x, conv), conv.kernel_size, dilation=conv.dilation, stride=conv.stride)
    return patches.double().view(x.shape[0], conv.groups, -1, patches.shape[-1])


def per_image_weight_gradients(patches: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``(B, C, D)``: each image's ``Σ_p δ_{i,p} x_p``, the conv's weight gradient for an output gradient
    ``δ (B, C, ...)``, from its :func:`image_patches` (groups kept apart)."""
    batch, groups, _, positions = patches.shape
    delta = delta.double().reshape(batch, groups, -1, positions)
    return torch.einsum("bgcl,bgdl->bgcd", delta, patches).reshape(batch, -1, patches.shape[2])


@dataclass(frozen=True)
class GradientPieces:
    """Per-image pieces of the three gradients of one layer's filters (module docstring), float64 on the CPU.

    Attributes:
        weight: ``(C, D)`` the filters.
        groups: the conv's groups.
        positions: output positions per image (L).
        loss: ``(N, C, D)`` each image's ``∂ℓ_n/∂W``.
        patch_output: ``(N, C, D)`` each image's ``Σ_p u_{i,p} x_p``.
        patch_sums, patch_squares: ``(N, groups, D)`` each image's ``Σ_p x_p`` and ``Σ_p x_p²`` (``tr Σ_X``, the
            ``input_capture`` normalisation: per group, averaged).
        output_sums, output_squares: ``(N, C)`` each image's ``Σ_p u_{i,p}`` and ``Σ_p u_{i,p}²``.
        pooled: ``(N, C)`` ā, the spatial mean of the site's activation.
        margin: ``(N,)`` the true-class logit margin.
        jacobian: ``(N, C, D)`` ``∂ā_{n,i}/∂w_i``.
    """

    weight: np.ndarray
    groups: int
    positions: int
    loss: np.ndarray
    patch_output: np.ndarray
    patch_sums: np.ndarray
    patch_squares: np.ndarray
    output_sums: np.ndarray
    output_squares: np.ndarray
    pooled: np.ndarray
    margin: np.ndarray
    jacobian: np.ndarray

    @property
    def n_images(self) -> int:
        return len(self.margin)

    def gradients(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """``{name: (R, C, D)}`` of :data:`GRADIENTS` on R resamples of the images (``weights (R, N)``: how often each
        image counts)."""
        total = weights.sum(1)
        count = total * self.positions
        channels_per_group = self.weight.shape[0] // self.groups
        group_means = _weighted_sum(weights, self.patch_sums) / count[:, None, None]
        trace = (_weighted_sum(weights, self.patch_squares) / count[:, None, None]
                 - group_means ** 2).sum((1, 2)) / self.groups
        mean_patch = np.repeat(group_means, channels_per_group, axis=1)
        mean_output = weights @ self.output_sums / count[:, None]
        covariance = _weighted_sum(weights, self.patch_output) / count[:, None, None]
        covariance -= mean_patch * mean_output[..., None]  # Σ_X w_i = Cov(x, u_i)
        variance = weights @ self.output_squares / count[:, None] - mean_output ** 2  # w_iᵀ Σ_X w_i
        norms = np.square(self.weight).sum(1)
        safe = np.where(norms > 0, norms, 1.0)
        rayleigh = variance / safe
        scale = (self.weight.shape[1] / trace)[:, None, None]
        capture = scale * 2 * (covariance - rayleigh[..., None] * self.weight) / safe[:, None]
        capture[:, norms <= 0] = 0.0
        loss = _weighted_sum(weights, self.loss) / total[:, None, None]
        return {"update": -loss, "capture": capture, "information": self._information_gradient(weights)}

    def _information_gradient(self, weights: np.ndarray) -> np.ndarray:
        """``∇_W Σ_i I(ā_i; m)`` (Gaussian, the margin fixed) on the resamples."""
        w = weights / weights.sum(1, keepdims=True)
        centred = self.pooled[None] - (w @ self.pooled)[:, None]  # (R, N, C)
        margin = self.margin[None] - (w @ self.margin)[:, None]  # (R, N)
        sd = np.sqrt(np.einsum("rn,rnc->rc", w, centred ** 2))
        sd_margin = np.sqrt(np.einsum("rn,rn->r", w, margin ** 2))
        defined = (sd > 0) & (sd_margin[:, None] > 0)
        sd = np.where(defined, sd, 1.0)
        sd_m = np.where(sd_margin > 0, sd_margin, 1.0)[:, None]
        r = np.clip(np.einsum("rn,rnc,rn->rc", w, centred, margin) / (sd * sd_m), -1 + 1e-12, 1 - 1e-12)
        slope = np.where(defined, r / (1 - r ** 2), 0.0)
        per_image = w[..., None] * slope[:, None] * (margin[..., None] / (sd * sd_m)[:, None]
                                                     - r[:, None] * centred / (sd ** 2)[:, None])
        return np.matmul(per_image.transpose(2, 0, 1), self.jacobian.transpose(1, 0, 2)).transpose(1, 0, 2)

    def cosines(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """``{cosine name: (R,)}`` of :data:`COSINES` over the whole layer's filters (NaN where a gradient is 0)."""
        flat = {name: value.reshape(len(weights), -1) for name, value in self.gradients(weights).items()}
        norms = {name: np.linalg.norm(value, axis=1) for name, value in flat.items()}
        out = {}
        for key, (a, b) in COSINES.items():
            product = norms[a] * norms[b]
            out[key] = np.where(product > 0, (flat[a] * flat[b]).sum(1) / np.where(product > 0, product, 1.0),
                                np.nan)
        return out


def _weighted_sum(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``(R, ...)``: ``Σ_n weights[r, n] · values[n]`` (one matrix product)."""
    return (weights @ values.reshape(len(values), -1)).reshape(len(weights), *values.shape[1:])


def gradient_pieces(model: nn.Module, site: ChannelSite, inputs: LabelledInputs, *, device: torch.device,
                    batch_size: int = 64) -> GradientPieces:
    """One pass of ``inputs`` through ``model`` (a private copy in eval mode: its parameters' ``requires_grad`` are
    changed) collecting :class:`GradientPieces` of ``site.layer`` (module docstring)."""
    conv = model.get_submodule(site.layer)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    conv.weight.requires_grad_(True)
    dtype = conv.weight.dtype
    captured: dict[str, torch.Tensor] = {}
    names = ("loss", "patch_output", "patch_sums", "patch_squares", "output_sums", "output_squares", "pooled",
             "margin", "jacobian")
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}

    def keep_input(module, args):
        captured["x"] = args[0].detach()

    def keep_output(module, args, output):
        captured["u"] = output
        return output.clone()  # an in-place activation after the conv changes the clone, not u

    def keep_site(module, args, output):
        captured["a"] = output

    with contextlib.ExitStack() as hooks:
        hooks.enter_context(on_call(model, conv, 0, keep_input, pre=True))
        hooks.enter_context(on_call(model, conv, 0, keep_output))
        if site.activation != site.layer:
            hooks.enter_context(on_call(model, model.get_submodule(site.activation), site.activation_call,
                                        keep_site))
        for x, y in inputs.batches(batch_size):
            x, y = x.to(device, dtype), y.to(device)
            with torch.enable_grad():
                logits = model(x)
                u = captured["u"]
                pooled = captured.get("a", u).flatten(2).mean(2)
                loss_delta, = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), u, retain_graph=True)
                pooled_delta, = torch.autograd.grad(pooled.sum(), u)
            u = u.detach()
            patches = image_patches(captured["x"], conv)
            for name, delta in (("loss", loss_delta), ("patch_output", u), ("jacobian", pooled_delta)):
                parts[name].append(per_image_weight_gradients(patches, delta).cpu())
            parts["patch_sums"].append(patches.sum(3).cpu())
            parts["patch_squares"].append(patches.square().sum(3).cpu())
            parts["output_sums"].append(u.double().flatten(2).sum(2).cpu())
            parts["output_squares"].append(u.double().flatten(2).square().sum(2).cpu())
            parts["pooled"].append(pooled.detach().double().cpu())
            parts["margin"].append(logit_margin(logits.detach(), y).double().cpu())
    conv.weight.requires_grad_(False)
    arrays = {name: torch.cat(values).numpy() for name, values in parts.items()}
    return GradientPieces(weight=conv.weight.detach().double().flatten(1).cpu().numpy(), groups=conv.groups,
                          positions=int(captured["u"][0, 0].numel()), **arrays)
