"""The shared prefix (fl_core.networks.partial_forward) across re-score variants: the same scores as full forward passes
(all-layer, stage-wise and one-layer swaps on a random-init MobileNetV2), the prefix run once per batch, copies that
share every unchanged tensor and change nothing per batch, kept passes, and a model whose later modules read a prefix
activation
falling back to full forward passes with the same numbers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from fl_core.io.images import bundled_images
from fl_core.io.models import LoadedModel, load_model
from fl_core.io.preprocessing import InputConfig
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.rescore import rescore
from fl_core.masterkeys.swap import swap_filters
from fl_core.networks.partial_forward import PrefixPasses, changed_keys, module_chain, plan_suffixes, shared_copy
from tests.masterkeys.test_clustering import tiny_loaded


def scores(result) -> list[tuple]:
    """Every score of every variant (not how it was computed)."""
    return [(v.method, v.n_images, v.agreement, v.kl, v.relative_error) for v in result.swaps]


def both_ways(loaded: LoadedModel, swaps, images=None, batch_size: int = 2):
    images = images or bundled_images().subset(range(5))
    return [rescore(loaded, images, swaps=swaps, batch_size=batch_size, workers=0, share_prefix=share)
            for share in (True, False)]


def patched_copies(model: nn.Module, patches: list[dict], x: torch.Tensor):
    """``(copies, changed, expected)``: a shared copy of ``model`` per patch, the names each changes, and each
    copy's full forward pass on ``x`` (the original's first)."""
    state = model.state_dict()
    changed = changed_keys(patches, state)
    copies = [shared_copy(model, {key: patch[key] for key in keys}) for patch, keys in zip(patches, changed)]
    with torch.no_grad():
        expected = [model(x)] + [copy(x) for copy in copies]
    return copies, changed, expected


@pytest.fixture(scope="module")
def mobilenet_random() -> LoadedModel:
    """torchvision MobileNetV2, random init with non-trivial BatchNorm statistics (folded into the convs) and a
    confident head, at 32 px."""
    loaded = load_model("torchvision:mobilenet_v2")
    model = loaded.copy_model().eval()
    generator = torch.Generator().manual_seed(0)
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        bn.running_mean.data = torch.randn(bn.running_mean.shape, generator=generator) * 0.1
        bn.running_var.data = torch.rand(bn.running_var.shape, generator=generator) + 0.5
    model.classifier[1].weight.data *= 100
    return dataclasses.replace(loaded, model=model, state_dict=model.state_dict(),
                               input_config=loaded.input_config.with_overrides(input_size=32))


def block_of(layer: str) -> str:
    """The MobileNetV2 chain module holding a layer: ``features.N``."""
    return ".".join(layer.split(".")[:2])


@pytest.mark.slow
def test_split_scores_equal_full_forward_scores_on_mobilenet(mobilenet_random):
    bank = depthwise_bank(mobilenet_random)
    last = max(bank.stages)
    one_layer = [lay.name for lay in bank.chosen()[4:6]]
    swaps = [swap_filters(bank, "B"), swap_filters(bank, "random", stages=[last]),
             *(swap_filters(bank, "zero", layers=[name]) for name in one_layer)]
    shared, whole = both_ways(mobilenet_random, swaps)
    assert scores(shared) == scores(whole) and (shared.n_images, shared.top1) == (whole.n_images, whole.top1)
    assert min(v.kl for v in whole.swaps) > 0  # the variants really differ from the original
    first_swapped = bank.chosen(stages=[last])[0].name
    assert [v.computed_from for v in shared.swaps] == [
        block_of(bank.chosen()[0].name), block_of(first_swapped), *map(block_of, one_layer)]
    assert all(v.computed_from is None for v in whole.swaps) and shared.sharing == whole.sharing == ()


class CountingConv(nn.Conv2d):
    """A conv that counts its real forward passes (a stub set on the instance bypasses this)."""

    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        return super().forward(x)


def chain_net() -> nn.Sequential:
    torch.manual_seed(1)
    return nn.Sequential(CountingConv(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4)).eval()


def test_the_prefix_runs_once_per_batch():
    model = chain_net()
    generator = torch.Generator().manual_seed(2)
    patches = [{"3.weight": torch.randn(8, 1, 3, 3, generator=generator)},
               {"1.weight": torch.randn(8, 1, 3, 3, generator=generator)}, {"0.bias": torch.zeros(8)}]
    x = torch.randn(6, 3, 12, 12, generator=generator)
    copies, changed, expected = patched_copies(model, patches, x)
    with torch.no_grad():
        plan = plan_suffixes(model, copies, changed, x[:2])
        assert plan.starts == (3, 1, 0) and plan.notes == ()
        assert [plan.start_name(i) for i in range(3)] == ["3", "1", None]
        CountingConv.calls = 0
        logits = list(plan.outputs(model, copies, x))
    assert CountingConv.calls == 2  # the original, and the copy that changes the stem; not the other two
    for got, want in zip(logits, expected):
        assert torch.equal(got, want)


def test_copies_share_every_unchanged_module_and_leave_the_original_alone():
    model = chain_net()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    copy = shared_copy(model, {"3.weight": torch.ones(8, 1, 3, 3)})
    assert torch.equal(copy[3].weight, torch.ones(8, 1, 3, 3)) and copy[3] is not model[3] and copy is not model
    assert all(copy[i] is model[i] for i in (0, 1, 2, 4, 5, 6, 7))
    assert all(torch.equal(model.state_dict()[key], value) for key, value in before.items())
    copy.register_forward_hook(lambda *args: None)
    assert not model._forward_hooks  # a new container has hooks of its own


def test_kept_passes_run_the_prefix_once_and_stream_beyond_the_budget():
    model = chain_net()
    x, y = torch.randn(6, 3, 12, 12), torch.arange(6) % 4
    with torch.no_grad():
        chain, _ = module_chain(model, x[:1])
    batches = [(x[:4], y[:4]), (x[4:], y[4:])]
    for budget, runs in ((1 << 30, 1), (1, 2)):
        passes = PrefixPasses(model, chain, {3}, lambda: iter(batches), torch.device("cpu"), budget)
        CountingConv.calls = 0
        iterations = [list(passes) for _ in range(2)]
        assert CountingConv.calls == 2 * runs  # two batches, once when kept, on every iteration when not
        for seen in iterations:
            assert [len(p.x) for p in seen] == [4, 2] and set(seen[0].activations) == {3}
            with torch.no_grad():
                assert torch.equal(seen[1].output, model(x[4:]))
                assert torch.equal(seen[1].activations[3], model[:3](x[4:]))


class InPlaceShift(nn.Module):
    """x += b per channel, in place on its input."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(channels, 1, 1), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.add_(self.shift)


def test_a_suffix_changing_its_input_in_place_gets_a_fresh_copy():
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), InPlaceShift(8), nn.Conv2d(8, 4, 3), nn.Flatten()).eval()
    patches = [{"1.shift": torch.ones(8, 1, 1)}, {"1.shift": torch.full((8, 1, 1), -2.0)}]
    x = torch.randn(3, 3, 9, 9)
    copies, changed, expected = patched_copies(model, patches, x)
    with torch.no_grad():
        plan = plan_suffixes(model, copies, changed, x[:2])
        assert plan.starts == (1, 1) and plan.fresh_copy == (True, True)
        for got, want in zip(plan.outputs(model, copies, x), expected):
            assert torch.equal(got, want)


class ReadsPrefixLater(nn.Module):
    """A chain stem → dw1 → dw2 → head whose forward also adds the stem's output before the head (so starting at dw2,
    with the stem stubbed, is wrong)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dw1 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.dw2 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        return self.head((self.dw2(self.dw1(y)) + y).mean(dim=(2, 3)))


def test_a_model_reading_a_prefix_activation_later_falls_back_with_the_same_numbers():
    torch.manual_seed(3)
    model = ReadsPrefixLater().eval().requires_grad_(False)
    loaded = LoadedModel(spec="test:reads_later", label="reads later", model=model, state_dict=model.state_dict(),
                         input_config=InputConfig(input_size=16, crop_pct=1.0), class_names=("a", "b", "c", "d"))
    with torch.no_grad():
        chain, _ = module_chain(model, torch.randn(1, 3, 16, 16))
    assert chain.names == ("stem", "dw1", "dw2", "head") and chain.direct == (False, True, True, False)
    bank = depthwise_bank(loaded)
    swaps = [swap_filters(bank, "random", layers=["dw2"]), swap_filters(bank, "zero", layers=["dw1"])]
    shared, whole = both_ways(loaded, swaps)
    assert scores(shared) == scores(whole) and min(v.kl for v in whole.swaps) > 0
    assert [v.computed_from for v in shared.swaps] == [None, "dw1"]  # from dw1 on, the stem's output is its input
    assert len(shared.sharing) == 1 and "random: full forward passes (from dw2 on" in shared.sharing[0]


@pytest.mark.slow
def test_functional_steps_between_modules_mean_full_forward_passes():
    loaded = tiny_loaded(seed=4)  # relu between every module: no direct link, nothing to share
    swaps = [swap_filters(depthwise_bank(loaded), name) for name in ("B", "zero")]
    shared, whole = both_ways(loaded, swaps)
    assert scores(shared) == scores(whole)
    assert [v.computed_from for v in shared.swaps] == [None, None] and shared.sharing == ()

