"""The one call shape of every family: models as specs, loaded models or modules, data as sources or image sets,
settings with keyword overrides, and misuse reported as an ArgumentError that names the argument."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import fl_core
from fl_core import (
    ArgumentError,
    EnergySettings,
    FilterLensError,
    LoadedModel,
    MasterKeySettings,
    RecoverySettings,
    RescoreSettings,
    analyze_energy,
    analyze_master_keys,
    analyze_scale_space,
    analyze_whitening,
    channel_data,
    rescore,
)
from fl_core.results import Result
from tests.script_modules import script_module

BANK = "demo:ppocrv6_det_small_dw7"
ENTRY_POINTS = ("analyze_energy", "analyze_whitening", "analyze_channels", "analyze_master_keys", "analyze_scale_space",
                "analyze_rescore", "sweep_layers", "build_report", "analyze_survey")


def small_net() -> nn.Module:
    """A plain module with 11 outputs, the classes of the bundled crops."""
    return nn.Sequential(nn.Conv2d(3, 8, 5, padding=2), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 11))


def test_the_type_checking_imports_are_the_registrys() -> None:
    """What type checkers see of ``fl_core`` is written from the registry (``python scripts/api_types.py``)."""
    with script_module("scripts/api_types.py") as api_types:
        source = Path(fl_core.__file__).read_text(encoding="utf-8")
        assert api_types.with_block(source, api_types.type_checking_block(fl_core.PUBLIC_API)) == source, (
            "fl_core/__init__.py's TYPE_CHECKING block is not the registry's: run python scripts/api_types.py")
        assert api_types.main(["--check"]) == 0


def test_master_keys_take_a_spec_and_setting_keywords():
    by_keyword = analyze_master_keys(BANK, k=8, restarts=1)
    by_settings = analyze_master_keys(BANK, settings=MasterKeySettings(k=8, restarts=1))
    assert by_keyword.k == 8 and len(by_keyword.clusters) == 8
    assert by_keyword.objective == by_settings.objective
    assert analyze_master_keys(BANK, settings=MasterKeySettings(k=3), k=4, restarts=1).k == 4  # keywords win


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(ArgumentError, match=r"'clusters'.*MasterKeySettings.*restarts") as caught:
        analyze_master_keys(BANK, clusters=8)
    assert isinstance(caught.value, FilterLensError) and isinstance(caught.value, TypeError)


def test_settings_of_another_family_are_refused_by_name():
    with pytest.raises(ArgumentError, match=r"settings must be a WhiteningSettings.*not EnergySettings"):
        analyze_whitening("demo:tiny_vgg", settings=EnergySettings())
    with pytest.raises(ArgumentError, match=r"analyze_master_keys .* takes no data .*MasterKeySettings"):
        analyze_master_keys(BANK, MasterKeySettings())  # settings passed where data goes


def test_rescore_is_analyze_rescore_under_its_earlier_name():
    assert fl_core.rescore is fl_core.analyze_rescore and {"rescore", "analyze_rescore"} <= set(fl_core.__all__)
    assert fl_core.analyze_rescore.__name__ == "analyze_rescore"


@pytest.mark.slow
def test_the_analyses_of_the_weights_alone_take_the_same_data_and_say_they_ignore_it(photos):
    batch = torch.rand(4, 3, 32, 32)
    plain = analyze_master_keys(BANK, k=4, restarts=1)
    for data in (batch, photos, "bundled"):
        with pytest.warns(UserWarning, match="analyze_master_keys analyses the weights alone: the data given is not"):
            given = analyze_master_keys(BANK, data, k=4, restarts=1)
        assert given.to_dict() == plain.to_dict()
    with pytest.warns(UserWarning, match="analyze_scale_space analyses the weights alone"):
        assert analyze_scale_space(None, batch).to_dict() == analyze_scale_space().to_dict()
    with pytest.raises(ArgumentError, match=r"data must be an image source .*not int"):
        analyze_master_keys(BANK, 42)


def test_a_list_where_one_model_is_expected_and_other_objects_are_refused_by_name():
    with pytest.raises(ArgumentError, match="model takes one model, not a list of 2"):
        analyze_master_keys([BANK, BANK])
    with pytest.raises(ArgumentError, match=r"models\[1\] must be a model spec string.*not dict"):
        analyze_whitening(["demo:tiny_vgg", {"conv": 1}])
    with pytest.raises(ArgumentError, match="names demo:tiny_vgg more than once"):
        analyze_whitening(["demo:tiny_vgg", "demo:tiny_vgg"])
    with pytest.raises(ArgumentError, match=r"data must be an image source .*not int"):
        analyze_energy("demo:tiny_vgg", 42)
    with pytest.raises(ArgumentError, match="swaps="):
        rescore("demo:tiny_vgg", "bundled", [object()])


@pytest.mark.slow
def test_a_plain_module_is_analysed_on_a_private_copy(photos):
    net = small_net()
    net.train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    images = photos.subset(range(3))
    result = analyze_energy(net, images, seeds=2)
    loaded = LoadedModel.from_module(net, name="mine")
    assert loaded.spec == "module:mine" and loaded.conv_layers[0].name == "0"
    again = analyze_energy(loaded, images, EnergySettings(seeds=2))
    np.testing.assert_allclose(result.models[0].profile, again.models[0].profile)
    assert result.models[0].spec == "module:Sequential"
    assert net.training and all(p.requires_grad for p in net.parameters())  # the caller's module is untouched
    assert all((net.state_dict()[k] == v).all() for k, v in before.items())
    data = channel_data(net, "crops", n_calibration=8, n_evaluation=8)
    assert len(data.calibration) == 8 and len(data.evaluation) == 8
    with pytest.raises(ArgumentError, match="n_evaluation must be at least 8"):  # ChannelDataSettings' bounds
        channel_data(net, "crops", n_calibration=8, n_evaluation=4)


def test_scale_space_fits_the_published_filters_or_a_model():
    published = analyze_scale_space(method="D1")
    assert published.method == "D1" and len(published.filters) == 8
    assert analyze_scale_space(BANK).source.startswith("per-key mean filters of")


def test_settings_are_plain_data_not_results():
    assert not issubclass(RecoverySettings, Result)
    assert RescoreSettings(replacements=["B"], stages=[1]).replacements == ("B",)  # hashable: a cache key
    hash(RescoreSettings(recovery=RecoverySettings()))


def test_banks_and_swaps_take_any_model_form():
    from fl_core import depthwise_bank, swap_filters

    swap = swap_filters(BANK, "B")  # a spec where a DepthwiseBank goes
    assert swap.relative_error == swap_filters(depthwise_bank(BANK), "B").relative_error
    with pytest.raises(FilterLensError, match=r"Sequential \(nn.Module\) has no depthwise convolution"):
        depthwise_bank(small_net())
