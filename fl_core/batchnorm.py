"""BatchNorm on private model copies: folding eval-mode BatchNorms into the convolutions before them (a faster
inference copy with the same outputs), and re-estimating running statistics on calibration images.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import torch
from torch import nn

log = logging.getLogger(__name__)


def _unfolded_rest(norm: nn.Module) -> nn.Module | None:
    """What is left of a BatchNorm module once its affine map is folded into the conv before it (eval mode): nothing
    for ``nn.BatchNorm2d``, the dropout and activation for timm's ``BatchNormAct2d``; ``None`` for anything else."""
    if type(norm) is nn.BatchNorm2d:
        return nn.Identity()
    if type(norm).__name__ == "BatchNormAct2d" and isinstance(norm, nn.BatchNorm2d):
        return nn.Sequential(norm.drop, norm.act)
    return None


def conv_batchnorm_pairs(model: nn.Module, example: torch.Tensor) -> tuple[list[tuple[str, str]], torch.Tensor]:
    """(conv, BN) module names where a foldable BatchNorm (:func:`_unfolded_rest`) reads an ``nn.Conv2d``'s output
    unchanged, and the model's output on ``example``.

    Found with forward hooks on one pass over ``example`` (not torch.fx: tracing patches ``nn.Module.__call__`` for
    every thread, which a shared server cannot allow). Modules called more than once are left out.
    """
    produced: dict[int, tuple[str, torch.Tensor, int]] = {}
    calls: dict[str, int] = {}
    pairs = []

    def after_conv(name: str):
        def hook(module, args, output):
            calls[name] = calls.get(name, 0) + 1
            produced[id(output)] = (name, output, output._version)
        return hook

    def before_bn(name: str):
        def hook(module, args):
            calls[name] = calls.get(name, 0) + 1
            source = produced.get(id(args[0]))
            if source is not None and source[1] is args[0] and source[2] == args[0]._version:
                pairs.append((source[0], name))
        return hook

    handles = []
    for name, module in model.named_modules():
        if type(module) is nn.Conv2d:
            handles.append(module.register_forward_hook(after_conv(name)))
        elif _unfolded_rest(module) is not None and module.running_mean is not None:
            handles.append(module.register_forward_pre_hook(before_bn(name)))
    try:
        with torch.no_grad():
            output = model(example)
    finally:
        for handle in handles:
            handle.remove()
    return [(conv, bn) for conv, bn in pairs if calls[conv] == calls[bn] == 1], output


def fold_batchnorm(model: nn.Module, example: torch.Tensor) -> dict[str, torch.Tensor]:
    """Fold each eval-mode BatchNorm of :func:`conv_batchnorm_pairs` into its conv, in place (use on a private copy).

    W ← s·W, b ← s·(b − μ) + β with s = γ / √(σ² + ε) per output channel; the BN becomes what follows its affine
    map (nothing, or timm's activation). The
    folded model's output on ``example`` is checked against the original's; if they differ (a conv output that is
    also read elsewhere), every change is undone and nothing is folded.

    Returns:
        conv weight name -> s, to fold replacement filters for that conv the same way.
    """
    model.eval()
    pairs, reference = conv_batchnorm_pairs(model, example)
    if not pairs:
        return {}
    reference = reference.float()
    with torch.no_grad():
        saved = [(model.get_submodule(conv).weight.clone(), model.get_submodule(conv).bias, model.get_submodule(bn))
                 for conv, bn in pairs]
        scales = {}
        for conv_name, bn_name in pairs:
            conv, bn = model.get_submodule(conv_name), model.get_submodule(bn_name)
            scale = torch.rsqrt(bn.running_var + bn.eps) * (bn.weight if bn.affine else 1.0)
            bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
            conv.weight.mul_(scale.view(-1, 1, 1, 1))
            conv.bias = nn.Parameter((bias - bn.running_mean) * scale + (bn.bias if bn.affine else 0.0),
                                     requires_grad=False)
            model.set_submodule(bn_name, _unfolded_rest(bn))
            scales[f"{conv_name}.weight"] = scale.detach()
        folded = model(example).float()
        if torch.allclose(folded, reference, rtol=1e-3, atol=1e-4 * float(reference.abs().max())):
            return scales
        log.warning("BatchNorm not folded: the folded network's output differs (a conv output is read elsewhere)")
        for (conv_name, bn_name), (weight, bias, bn) in zip(pairs, saved):
            conv = model.get_submodule(conv_name)
            conv.weight.copy_(weight)
            conv.bias = bias
            model.set_submodule(bn_name, bn)
    return {}


def folded_patch(patch: Mapping[str, torch.Tensor], scales: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replacement filters for a model folded by :func:`fold_batchnorm`: each folded conv's by its s."""
    return {key: tensor * scales[key].to(tensor).view(-1, 1, 1, 1) if key in scales else tensor
            for key, tensor in patch.items()}


def recalibrate_batchnorm(model: nn.Module, batches: Iterable[torch.Tensor], device: torch.device) -> int:
    """Re-estimate the running statistics of every BatchNorm on calibration batches, in place (a private copy).

    Each BatchNorm's running mean and variance are reset and replaced by the average over the batches of its batch
    mean and (unbiased) batch variance (PyTorch's cumulative average, ``momentum=None``), the network otherwise in
    eval mode (dropout off) and without gradients; γ, β and every weight stay as they are. Afterwards the model is
    in eval mode with each BatchNorm's momentum restored.

    Returns:
        how many BatchNorm layers were recalibrated.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    momenta = [norm.momentum for norm in norms]
    model.eval()
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
        norm.train()
    try:
        with torch.no_grad():
            for x in batches:
                model(x.to(device))
    finally:
        for norm, momentum in zip(norms, momenta):
            norm.momentum = momentum
        model.eval()
    return len(norms)
