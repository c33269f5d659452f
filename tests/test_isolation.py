"""Sessions never disturb each other through a shared, cached model.

Hooks belong to a module, not to a thread: a hook registered on the cached model by one session fires inside every
other session's forward pass. These tests prove that no analysis registers a hook (or sets a flag) on a shared
model, that the layer inventory is taken once when the model is loaded, that hook-based analyses run from several
threads at once give the single-threaded numbers (to float rounding: torch's thread count is one per process), and
that the hub-offline decision is made once.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch import nn

import fl_core.io.layers as layers_module
import fl_core.io.models as models_module
import fl_core.io.registries as registries_module
from fl_core.channelaxes.analysis import ChannelSettings, analyze_channels
from fl_core.channelaxes.calibration import channel_data
from fl_core.errors import WeightsUnavailableError
from fl_core.firstlayer.energy import EnergySettings, analyze_energy
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.layers import conv_inventory, first_conv_name
from fl_core.io.models import load_model
from fl_core.io.preprocessing import InputConfig
from fl_core.masterkeys.clustering import MasterKeySettings, analyze_master_keys
from fl_core.masterkeys.depthwise import depthwise_bank

from .test_concurrency import run_together, weights_hash

ARCH = "mobilenetv2_050"
"""A small MobileNetV2 (depthwise layers and BatchNorms) with an 11-class head, one class per bundled photo, so the
channel analysis can score it on the bundled crops."""
INPUT = {"input_size": 64, "crop_pct": 1.0}
DEEP_LAYER = "blocks.2.0.conv_pw"
CHANNEL_LAYER = "blocks.3.0.conv_pwl"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    import timm

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("isolation") / "mnv2_11.safetensors"
    save_state_dict(timm.create_model(ARCH, num_classes=11).state_dict(), path)
    return load_model(f"timm:{ARCH}={path}", input_overrides=INPUT)


@pytest.fixture
def hooks_on(monkeypatch):
    """Ids of every module a hook is registered on while the test runs."""
    hooked: set[int] = set()
    for name in ("register_forward_hook", "register_forward_pre_hook"):
        original = getattr(nn.Module, name)

        def recording(module, *args, _original=original, **kwargs):
            hooked.add(id(module))
            return _original(module, *args, **kwargs)

        monkeypatch.setattr(nn.Module, name, recording)
    return hooked


def _energy(loaded, photos) -> np.ndarray:
    result = analyze_energy([loaded], photos.subset(range(3)), EnergySettings(layer=DEEP_LAYER, seeds=2), device="cpu")
    return result.models[0].profile


def _master_keys(loaded) -> tuple:
    bank = depthwise_bank(loaded)
    result = analyze_master_keys(bank, settings=MasterKeySettings(k=4, restarts=2, seed=0), device="cpu")
    return tuple(lay.stage for lay in bank.layers), tuple(c.size for c in result.clusters)


def _channels(loaded) -> np.ndarray:
    data = channel_data(loaded, "crops", n_calibration=32, n_evaluation=16)
    result = analyze_channels(loaded, data, ChannelSettings(layer=CHANNEL_LAYER, cluster_seeds=2, cluster_k=2,
                                                            lesion_kinds=("mean",), pruning=None), device="cpu")
    return result.table[["input_capture", "lesion_dloss"]].to_numpy()


@pytest.mark.slow
def test_no_analysis_hooks_the_shared_model(shared, photos, hooks_on) -> None:
    before = weights_hash(shared)
    _energy(shared, photos)
    _master_keys(shared)
    _channels(shared)
    shared_modules = {id(m) for m in shared.model.modules()}
    assert hooks_on, "the analyses use hooks: the recorder must have seen them"
    assert not hooks_on & shared_modules, "a hook was registered on the shared, cached model"
    assert weights_hash(shared) == before
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in shared.model.modules())


@pytest.mark.slow
def test_the_inventory_is_taken_once_at_load(shared, monkeypatch) -> None:
    def no_forward(*_args, **_kwargs):
        raise AssertionError("a forward pass was run to list layers")

    monkeypatch.setattr(layers_module, "_probe_forward", no_forward)
    layers = conv_inventory(shared)
    assert first_conv_name(shared) == "conv_stem" and layers[0].kind == "first"
    assert [lay.output_size for lay in layers[:2]] == [32, 32]  # 64-px input, stride-2 stem
    stages = [lay.stage for lay in depthwise_bank(shared).layers]
    assert stages == sorted(stages) and len(set(stages)) >= 4  # stages from output sizes, in forward order


def test_a_failing_probe_says_so_in_the_notes() -> None:
    class NeedsBigInput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b, self.a = nn.Conv2d(8, 8, 3), nn.Conv2d(3, 8, 3)

        def forward(self, x):
            if x.shape[-1] < 300:
                raise RuntimeError("input too small")
            return self.b(self.a(x))

    net = NeedsBigInput()
    loaded = models_module.LoadedModel(spec="t", label="t", model=net, state_dict=net.state_dict(),
                                       input_config=InputConfig())
    assert [lay.name for lay in loaded.conv_layers] == ["b", "a"]  # registration order
    assert any("registration order" in note for note in loaded.notes)


@pytest.mark.slow
def test_hook_based_analyses_from_several_threads_match_single_threaded(shared, photos) -> None:
    """Energy of a deeper layer, master-key stages and a channel analysis, twice each, all at once."""
    jobs = [lambda: _energy(shared, photos), lambda: _master_keys(shared), lambda: _channels(shared)] * 2
    alone = [job() for job in jobs[:3]]
    together = run_together(jobs)
    for i, result in enumerate(together):
        expected = alone[i % 3]
        if isinstance(expected, np.ndarray):
            # torch's CPU threads are one setting per process: a channel analysis beside the others lowers them for
            # every job while it runs (fl_core.compute.device.cpu_threads, by the load average), and a reduction
            # split over fewer threads adds in another order: the same numbers to float32's rounding (energy profiles
            # differ by 3e-8 relative between 1 and 2 threads), while a hook or flag leaking from another session
            # would move them by far more than this tolerance.
            np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6, err_msg=f"job {i} was disturbed")
        else:
            assert result == expected, f"job {i} was disturbed"


@pytest.mark.slow
def test_a_forward_copy_shares_weights_but_not_hooks(shared) -> None:
    view = shared.forward_copy(torch.device("cpu"))
    assert view is not shared.model
    assert all(a is b for a, b in zip(view.parameters(), shared.model.parameters()))
    view.get_submodule(DEEP_LAYER).register_forward_pre_hook(lambda *_: None)
    assert not shared.model.get_submodule(DEEP_LAYER)._forward_pre_hooks


def test_the_hub_offline_decision_is_made_once(monkeypatch) -> None:
    from huggingface_hub import constants

    calls = []
    monkeypatch.setattr(registries_module, "_reachable", lambda *a, **k: calls.append(a) or False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    registries_module.hub_offline.cache_clear()
    for _ in range(2):
        with pytest.raises(WeightsUnavailableError):
            load_model("timm:resnet18@pretrained")
    assert len(calls) == 1 and constants.HF_HUB_OFFLINE is True
    threads = [threading.Thread(target=registries_module.hub_offline) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
