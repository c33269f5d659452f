"""Channel Axes end to end: identities on a real pass, planted structure, the JSON contract, the real SqueezeNet."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from scipy.stats import spearmanr

from fl_core.channelaxes.analysis import ChannelSettings, analyze_channels
from fl_core.channelaxes.calibration import LabelledInputs, channel_data, class_mapping
from fl_core.channelaxes.interventions import LESION_KINDS, fold_peer_replacement
from fl_core.channelaxes.layerstats import AxisSettings, collect_layer_statistics, local_axis
from fl_core.channelaxes.pruner import LayerPruner
from fl_core.channelaxes.pruning import PruningSettings
from fl_core.channelaxes.site import locate_site
from fl_core.errors import DataError
from fl_core.io.models import load_model

from .planted_nets import alone_world, duplicate_world

CPU = torch.device("cpu")
FAST = ChannelSettings(cluster_seeds=2, cluster_k=2, lesion_kinds=LESION_KINDS, pruning=None)
DESIGN_CHANNEL_KEYS = {"index", "input_capture", "peer_overlap", "peer_r2", "task_info", "target_excess",
                       "lesion_dloss", "replacement_dloss"}


def ols_r2(target: np.ndarray, predictors: np.ndarray) -> float:
    design = np.column_stack([np.ones(len(target)), predictors])
    coefficients, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = target - design @ coefficients
    centred = target - target.mean()
    return float(1 - residual @ residual / (centred @ centred))


@pytest.mark.slow
def test_capture_and_peer_r2_identities_on_a_real_pass(demo) -> None:
    loaded = demo[0]
    model = loaded.copy_model()
    data = channel_data(loaded, "crops", n_calibration=24, n_evaluation=8)
    site = locate_site(model, "features.4", data.calibration.head(1)[0])
    stats = collect_layer_statistics(model, site, data.calibration, device=CPU, batch_size=10)
    local = local_axis(stats, AxisSettings(shrinkage=0.0))

    conv = model.get_submodule("features.4")
    inputs, outputs = [], []

    def capture(_module, args, output) -> None:
        inputs.append(args[0])
        outputs.append(output)

    handle = conv.register_forward_hook(capture)
    with torch.inference_mode():
        model(data.calibration.head(24)[0])
    handle.remove()
    x = inputs[0].double()
    patches = F.unfold(x, 3, padding=1).transpose(1, 2).reshape(-1, 32 * 9).numpy()
    sigma = np.cov(patches, rowvar=False, ddof=0)
    w = conv.weight.detach().double().flatten(1).numpy()
    np.testing.assert_allclose(local.capture.raw.numpy(), np.einsum("id,de,ie->i", w, sigma, w), rtol=1e-6)
    u = outputs[0].double().transpose(0, 1).reshape(64, -1).numpy().T
    np.testing.assert_allclose(local.capture.raw.numpy(), u.var(axis=0), rtol=1e-6)
    assert float(stats.input_trace[0]) == pytest.approx(np.trace(sigma), rel=1e-9)
    for channel in (0, 17, 63):
        others = np.delete(u, channel, axis=1)
        assert float(local.r2_all_pre[channel]) == pytest.approx(ols_r2(u[:, channel], others), abs=1e-6)
    assert stats.n_images == 24 and stats.positions == 16 * 16


@pytest.mark.slow
def test_exact_duplicate_is_replaceable_and_removable_after_peer_replacement() -> None:
    loaded, data = duplicate_world()
    result = analyze_channels(loaded, data, replace(FAST, layer="conv"), device="cpu")
    table = result.table
    assert table.loc[[1, 2], "peer_r2"].min() > 0.999 and table.loc[[1, 2], "peer_r2_all"].min() > 0.99
    assert table.loc[[0, 3, 4], "peer_r2"].max() < 0.05
    assert table.loc[2, "lesion_dloss"] > 0.1 and table.loc[2, "lesion_daccuracy"] < -0.05
    assert abs(table.loc[2, "replacement_dloss"]) < 1e-3
    # whatever the duplicate knows about the margin, its twin knows too: no target-excess information
    assert table.loc[2, "target_excess"] < 0.05 * table.loc[2, "task_info"]

    assert result.replacement_method().endswith("identical to folding it into head")
    # Fold the replacement into the 1×1 reader, then remove the channel for real: no loss.
    model = loaded.copy_model()
    site, peers = result.site, result.interventions.replacement_peers[2]
    fold_peer_replacement(model, site, 2, torch.from_numpy(peers), torch.from_numpy(
        result.interventions.replacement_beta[2]), float(result.interventions.replacement_intercept[2]))
    pruned = LayerPruner(model, "conv", data.calibration.head(1)[0]).pruned_copy([2]).model
    assert pruned.conv.out_channels == 4
    x, y = data.evaluation.head(len(data.evaluation))
    with torch.inference_mode():
        loss = float(F.cross_entropy(pruned(x), y))
        accuracy = float((pruned(x).argmax(1) == y).float().mean())
    assert loss == pytest.approx(result.interventions.base_loss, abs=1e-3)
    assert accuracy >= result.interventions.base_accuracy - 0.01


@pytest.mark.slow
def test_a_channel_that_alone_carries_the_label_is_informative_and_lesion_sensitive() -> None:
    loaded, data = alone_world()
    table = analyze_channels(loaded, data, replace(FAST, layer="conv"), device="cpu").table
    others = table.drop(index=0)
    assert table["task_info"].idxmax() == 0 and table.loc[0, "task_info"] > 0.3
    assert table.loc[0, "task_info"] > 50 * others["task_info"].max()
    assert table.loc[0, "task_info_gauss"] > 50 * others["task_info_gauss"].max()
    assert table["lesion_dloss"].idxmax() == 0 and table.loc[0, "lesion_dloss"] > 1.0
    assert table.loc[0, "lesion_daccuracy"] < -0.3 and others["lesion_dloss"].abs().max() < 1e-3


@pytest.mark.slow
def test_demo_analysis_contract_and_the_cached_model_is_untouched(demo) -> None:
    loaded, init = demo
    before = {k: v.clone() for k, v in loaded.state_dict.items()}
    data = channel_data(loaded, "crops", n_calibration=96, n_evaluation=48)
    pruning = PruningSettings(criteria=("local", "target", "l1", "bn_gamma", "taylor", "random"),
                              fractions=(0.25, 0.5), finetune_steps=2, finetune_batch=16)
    progress = []
    result = analyze_channels(loaded, data, replace(FAST, layer="features.14", pruning=pruning), init=init,
                              device="cpu", progress=lambda f, m: progress.append(f))
    out = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert out["layer"] == "features.14" and len(out["channels"]) == 128
    assert set(out["channels"][0]) >= DESIGN_CHANNEL_KEYS
    assert -1 <= out["spearman"] <= 1 and -1 <= out["ari"] <= 1 and out["init"]["spec"] == "demo:tiny_vgg_init"
    assert set(out["pruning"]) == set(pruning.criteria)
    curves = list(out["pruning"].values())
    assert all(c["flops_removed"] == curves[0]["flops_removed"] for c in curves)  # FLOPs-matched
    assert curves[0]["flops_removed"][0] == 0 and np.all(np.diff(curves[0]["flops_removed"]) > 0)
    assert all(0 <= c["auc"] <= 1 and len(c["accuracy_finetuned"]) == 3 for c in curves)
    assert out["interventions"]["mode"] == "suffix" and out["interventions"]["base_accuracy"] > 0.5
    assert result.removability.better_axis_pruning in ("local", "target")
    assert {"score_l1", "score_taylor"} <= set(result.to_frame().columns)
    assert progress[-1] == 1.0 and progress == sorted(progress)
    assert all(torch.equal(before[k], v) for k, v in loaded.state_dict.items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in loaded.model.modules())
    assert not any(p.requires_grad for p in loaded.model.parameters())


def _tree(root, classes: list[str], per_class: int = 2) -> str:
    for i, name in enumerate(classes):
        (root / name).mkdir()
        for j in range(per_class):
            Image.new("RGB", (40, 36), (20 * i, 10 * j, 90)).save(root / name / f"{j}.jpg")
    return str(root)


@pytest.mark.slow
def test_class_mapping_by_wnid_by_name_and_refusal(tmp_path, demo) -> None:
    squeeze = load_model("torchvision:squeezenet1_0")
    mapping, warnings = class_mapping(["n01443537", "n01440764", "n15075141"], squeeze)
    assert mapping.tolist() == [1, 0, 999] and warnings  # canonical ImageNet order, not folder order
    names = demo[0].class_names
    mapping, warnings = class_mapping([names[3], names[0]], demo[0])
    assert mapping.tolist() == [3, 0] and warnings
    mapping, warnings = class_mapping(list(names), demo[0])
    assert mapping.tolist() == list(range(11)) and warnings == ()
    with pytest.raises(DataError):
        class_mapping([f"class{i}" for i in range(12)], demo[0])

    root = _tree(tmp_path, ["n15075141", "n01443537"], per_class=3)
    data = channel_data(squeeze, root, n_calibration=10, n_evaluation=10, seed=1)
    assert len(data.calibration) == len(data.evaluation) == 3 and data.warnings
    assert set(data.calibration.labels.tolist() + data.evaluation.labels.tolist()) == {1, 999}
    again = channel_data(squeeze, root, n_calibration=10, n_evaluation=10, seed=1)
    assert torch.equal(again.calibration.labels, data.calibration.labels)


def test_channel_data_leaves_out_the_images_of_folders_the_model_has_no_class_for(tmp_path, demo) -> None:
    (tmp_path / "some").mkdir(), (tmp_path / "none").mkdir()
    root = _tree(tmp_path / "some", ["astronaut", "Coffee", "dog", "cat"], per_class=3)
    data = channel_data(demo[0], root, n_calibration=10, n_evaluation=10, seed=0)
    assert len(data.calibration) + len(data.evaluation) == 6  # the 6 of astronaut and coffee, not dog and cat
    assert set(data.calibration.labels.tolist() + data.evaluation.labels.tolist()) <= {0, 1}
    assert any(w.startswith("6 of 12 images, in 2 of 4 folders ('cat', 'dog')") for w in data.warnings)
    with pytest.raises(DataError, match="no folder name"):
        channel_data(demo[0], _tree(tmp_path / "none", ["dog", "cat"], per_class=1), n_calibration=8,
                     n_evaluation=8)


def test_labelled_inputs_stream_and_materialize(tmp_path, demo) -> None:
    root = _tree(tmp_path, ["astronaut", "coffee"], per_class=3)
    data = channel_data(demo[0], root, n_calibration=8, n_evaluation=8)
    streamed = data.calibration
    assert not streamed.in_memory and [len(y) for _, y in streamed.batches(2)] == [2, 1]
    held = streamed.materialized(1 << 20)
    assert held.in_memory and torch.equal(held.head(3)[0], streamed.head(3)[0])
    assert streamed.materialized(10) is streamed
    with pytest.raises(ValueError):
        LabelledInputs()


@pytest.mark.slow
def test_real_squeezenet_fire_module_on_the_imagenet_sample(squeezenet, imagenet_sample) -> None:
    data = channel_data(squeezenet, str(imagenet_sample), n_calibration=32, n_evaluation=12, seed=0)
    assert data.warnings == ()  # all 1000 wnids: sorted folders are the canonical class order
    pruning = PruningSettings(criteria=("local", "target", "l1"), fractions=(0.25, 0.5), finetune_steps=0)
    settings = ChannelSettings(layer="features.12.squeeze", cluster_seeds=3, lesion_kinds=("mean", "replace"),
                               pruning=pruning, batch_size=16)
    result = analyze_channels(squeezenet, data, settings, device="cpu")
    assert result.site.activation == "features.12.squeeze_activation" and result.site.foldable
    assert result.calibration_accuracy > 0.3 and result.positions == 13 * 13
    table = result.table
    assert len(table) == 64 and np.isfinite(table[["input_capture", "peer_overlap", "task_info",
                                                   "target_excess", "lesion_dloss", "replacement_dloss"]]).all().all()
    assert (table["peer_overlap"] > 0).all() and (table["task_info"] >= 0).all()
    effects = result.interventions.effects
    assert (effects.mode, effects.computed_from) == ("suffix", "features.12.squeeze_activation")  # from the site on
    pruning_result = result.pruning
    assert pruning_result.macs[0] == 818_924_576  # SqueezeNet 1.0's convolutions at 224²: 0.82 GMACs
    assert pruning_result.channels_removed == [0, 16, 32]
    assert np.all(np.diff(pruning_result.macs) < 0)
    json.dumps(result.to_dict(), allow_nan=False)


@pytest.mark.slow
def test_figures_show_every_channel_with_its_filter_and_every_curve_with_its_auc() -> None:
    from fl_core.channelaxes import plots

    loaded, data = duplicate_world(n_calibration=200, n_evaluation=100)
    pruning = PruningSettings(criteria=("local", "peer_r2", "l1"), fractions=(0.2, 0.4), finetune_steps=0)
    result = analyze_channels(loaded, data, replace(FAST, layer="conv", pruning=pruning), device="cpu")
    scatter = plots.axes_scatter_figure(result)
    assert len(scatter.data[0].x) == 5 and "in 1: +1.00" in scatter.data[0].customdata[1][1]  # green box filter
    assert plots.filter_glyph(np.ones((2, 3, 3))).startswith("████")
    bars = plots.lesion_bars_figure(result)
    assert [t.name for t in bars.data] == ["mean-ablation", "zero-ablation", "peer replacement"]
    assert list(bars.data[0].x[:3]) == ["0", "1", "2"]  # sorted by lesion effect: red first, then the duplicates
    curves = plots.pruning_curves_figure(result.pruning)
    assert [t.name.split(" (AUC")[0] for t in curves.data] == ["local axis", "peer R²", "L1 norm"]
    for name, trace in zip(result.pruning.curves, curves.data):
        curve = result.pruning.curves[name]  # in percentage points with the interval and n, as the verdict writes it
        assert f"AUC {100 * curve.auc:.1f} pp [{100 * curve.auc_ci[0]:.1f}, {100 * curve.auc_ci[1]:.1f}], n = 100" \
            in trace.name
    correlations = result.metric_correlations()
    constant = replace(result, table=result.table.assign(score_bn_gamma=1.0))  # a folded BatchNorm: every |γ| = 1
    assert list(constant.metric_correlations().columns) == list(correlations.columns)  # no blank row for it
    np.testing.assert_allclose(np.diag(correlations.to_numpy()), 1.0)
    np.testing.assert_allclose(correlations.to_numpy(), correlations.to_numpy().T)
    assert correlations.loc["input_capture", "score_l1"] == pytest.approx(
        spearmanr(result.table["input_capture"], result.table["score_l1"]).statistic)
    heatmap = plots.metric_correlation_figure(result).data[0]
    assert list(heatmap.x) == [plots.short_label(c) for c in correlations.columns]
    assert plots.filter_figure(result, 0).layout.title.text.startswith("Channel 0")
    assert "quantity" in plots.summary_table(result).columns
