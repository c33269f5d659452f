"""A layer's channel axes followed over a Training Lab run: stored per snapshot with their intervals, equal when the
``channels`` command measures them again from the run's checkpoints, without changing what is trained."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fl_core.channelaxes.claims import VERDICTS
from fl_core.cli import main
from fl_core.errors import DataError, ModelSpecError
from fl_core.lab.axes import run_axes
from fl_core.lab.runs import CHECKPOINTS, RunSettings, load_run, train_run
from fl_core.lab.summary import run_summary
from fl_core.lab.train import TrainSettings
from fl_core.settings import replace_settings

FOLLOWED = RunSettings(width=8, body_widths=(8, 8), crops_per_image=20, snapshots=3, channel_axes="features.7",
                       axes_bootstrap=30, train=TrainSettings(steps=8, batch_size=32, lr=0.5))
"""A tiny net (its third convolution has 8 channels) followed at steps 0, 1 and 8."""


@pytest.fixture(scope="module")
def followed(tmp_path_factory):
    return train_run(FOLLOWED, tmp_path_factory.mktemp("runs") / "followed", progress=False)


def rows(trajectory) -> list[dict]:
    return trajectory.to_frame().drop(columns="seconds").to_dict(orient="records")


@pytest.mark.slow
def test_every_snapshot_stores_rho_with_its_interval_the_measurable_share_and_the_claim_5_cosines(followed) -> None:
    trajectory = followed.channel_axes
    assert trajectory.layer == "features.7" and trajectory.steps == [0, 1, 8] == followed.steps
    for snapshot in trajectory.snapshots:
        low, high = snapshot.spearman_ci
        assert -1 <= low <= high <= 1 and snapshot.n_images == int(followed.provenance["val_crops"])
        assert 0 <= snapshot.significant_share <= 1 and snapshot.noise_floor > 0
        for name in ("cos_update_capture", "cos_update_information", "cos_capture_information"):
            value, (low, high) = snapshot.cosines[name], snapshot.cosines_ci[name]
            assert -1 <= low <= high <= 1 and np.isfinite(value)
    stored = json.loads((load_run(followed.path).checkpoint("final").parent / "run.json").read_text())["channel_axes"]
    assert [s["step"] for s in stored["snapshots"]] == [0, 1, 8]
    assert rows(load_run(followed.path).channel_axes) == rows(trajectory)
    claims = run_summary(followed)["axes_claims"]  # train --json: the two-axis paper's claims 1, 2 and 5
    assert [row["number"] for row in claims] == [1, 2, 5] and {row["verdict"] for row in claims} <= set(VERDICTS)


@pytest.mark.slow
def test_the_channels_command_on_the_run_folder_gives_the_same_rows(followed, tmp_path, capsys) -> None:
    out = tmp_path / "axes.json"
    assert main(["channels", "--model", f"weights:{followed.path}", "--json", str(out), "--quiet"]) == 0
    assert "2. The axes induce different channel groupings" in capsys.readouterr().out
    measured = json.loads(out.read_text())
    stored = followed.channel_axes.to_dict()
    for again, before in zip(measured["snapshots"], stored["snapshots"], strict=True):
        again.pop("seconds"), before.pop("seconds")
        assert _close(again, before), (again, before)


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return a == b


@pytest.mark.slow
def test_following_the_axes_saves_every_snapshot_and_changes_nothing_that_is_trained(followed) -> None:
    saved = sorted(p.name for p in (load_run(followed.path).checkpoint("final").parent / CHECKPOINTS).iterdir())
    assert saved == ["step_000000.safetensors", "step_000001.safetensors", "step_000008.safetensors"]
    plain = train_run(replace_settings(FOLLOWED, {"channel_axes": None}), progress=False)
    np.testing.assert_array_equal(plain.final_weights, followed.final_weights)
    assert plain.history.val_loss == followed.history.val_loss


def test_a_followed_layer_that_is_not_a_convolution_is_refused_before_training(tmp_path) -> None:
    with pytest.raises(ModelSpecError, match=r"no convolution 'features\.8'.*features\.7"):
        train_run(replace_settings(FOLLOWED, {"channel_axes": "features.8"}), tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad" / "run.json").exists()


@pytest.mark.slow
def test_a_run_without_checkpoints_or_a_followed_layer_says_what_to_do(tmp_path) -> None:
    bare = train_run(replace_settings(FOLLOWED, {"channel_axes": None, "steps": 1, "snapshots": 2}),
                     tmp_path / "bare", save_checkpoints=False, progress=False)
    with pytest.raises(DataError, match="followed no layer"):
        run_axes(bare.path)
    with pytest.raises(DataError, match="no full checkpoints"):
        run_axes(bare.path, "features.7")
