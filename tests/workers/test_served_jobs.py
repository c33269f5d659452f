"""Every heavy job kind of the dashboard (:mod:`fl_ui.jobs`) run the way it is served: submitted to the engine, computed
in a Dask worker process (daemonic: it may not start processes of its own), on more than one batch of images."""

from __future__ import annotations

import inspect
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fl_core.channelaxes.settings import ChannelSettings, PruningSettings
from fl_core.channelaxes.site import default_channel_layer
from fl_core.firstlayer.energy import EnergySettings
from fl_core.firstlayer.whitening import WhiteningSettings
from fl_core.io.layers import conv_inventory
from fl_core.io.models import load_model
from fl_core.lab.runs import RunSettings
from fl_core.lab.train import TrainSettings
from fl_core.masterkeys.layersweep import LayerSweepSettings
from fl_core.masterkeys.rescore import RescoreSettings
from fl_core.report.build import ReportSettings
from fl_core.survey.analysis import SurveySettings
from fl_ui import jobs
from fl_ui.engine import Lane

from ..conftest import IMAGENET_SAMPLE, require_fixture

TINY = (("demo:tiny_vgg", ()),)
"""The tiny demo: the job's machinery, not its model, is what most cases test."""
DEPTHWISE = "demo:mobilenet_v2"
"""The real ImageNet MobileNetV2 that ships as a demo: depthwise layers to swap, ImageNet classes for labels."""
LABELLED_IMAGES = 143
"""A labelled re-score of this many ImageNet-sample images (one per class, spread over the 1000): three batches of the
default 64, the upload that failed on every served page while re-scoring started DataLoader processes in the worker."""


@dataclass(frozen=True)
class Served:
    """One job kind: its function, a request over more than one batch, and what its result must show."""

    job: Callable
    request: Callable[[Path], object]
    check: Callable[[object], None]
    graceful: bool = False
    lane: Lane = Lane.INTERACTIVE


def tiny_layer() -> str:
    return default_channel_layer(conv_inventory(load_model("demo:tiny_vgg")))


def check_energy(result) -> None:
    assert result.images.startswith("11 bundled photos") and result.models[0].profile.size > 0  # 11 one-image batches


def check_whitening(result) -> None:
    assert result.images.startswith("11 bundled photos") and set(result.curves) >= {"rgb", "zca"}


def check_channels(result) -> None:
    assert (result.n_calibration, result.n_evaluation) == (64, 40)  # 2 batches of 32 each
    assert len(result.table) >= 2 and result.pruning is not None


def check_network_pruning(result) -> None:
    assert result.n_images == 40 and result.recovery_images == 64  # 2 batches of 32 each, recovered on 64 images
    assert result.targets == [0.1, 0.2] and len(result.layers) == 2 and result.differences["recovered"]["ci"]


def check_unlabelled_rescore(result) -> None:
    assert result.n_images == 11 and result.top1 is None  # 3 batches of 4
    assert 0.0 <= result.swaps[0].agreement <= 1.0 and result.swaps[0].kl > 0


def check_labelled_rescore(result) -> None:
    assert result.n_images == LABELLED_IMAGES and "wnid" in result.classes
    assert result.top1 >= 0.5 and result.top5 >= result.top1  # the real MobileNetV2 (78.7 % top-1 on this sample)
    assert result.swaps[0].method == "B" and result.swaps[0].top1 is not None


def check_layer_sweep(result) -> None:
    assert result.n_images == 11 and len(result.rows) >= 2  # 3 batches of 4, each depthwise layer of stages 0-1


def check_report(result) -> None:
    assert result.accuracy.n_images == 72 and result.accuracy.top1 >= 0.5  # 2 batches of 64
    assert result.channels is not None and result.channels.n_calibration == 40  # 2 batches of 32
    assert result.masterkeys is not None and result.masterkeys.n_filters > 0


def check_survey_row(result) -> None:
    assert result.error is None and result.values and result.worker.startswith("tls://")


def check_training(result) -> None:
    assert result.steps == [0, 1, 5] and not result.history.stopped_early  # 5 steps of 32 crops each, snapshots
    assert Path(result.path, "run.json").is_file()


def training_request(tmp_path: Path) -> jobs.TrainingRequest:
    config = RunSettings(width=8, body_widths=(8, 8), crops_per_image=20, snapshots=3,
                         train=TrainSettings(steps=5, batch_size=32, lr=0.5))
    return jobs.TrainingRequest(config, str(tmp_path / "run"), None)


def labelled_sample(_: Path) -> jobs.ScoringRequest:
    return jobs.ScoringRequest(DEPTHWISE, (), str(require_fixture(IMAGENET_SAMPLE)), LABELLED_IMAGES,
                               RescoreSettings(replacements=("B",)), "cpu")


SERVED = {
    "energy": Served(jobs.energy_job, lambda _: jobs.EnergyRequest(TINY, "bundled", EnergySettings(seeds=2), False,
                                                                   "cpu"), check_energy),
    "whitening": Served(jobs.whitening_job, lambda _: jobs.WhiteningRequest(TINY, "bundled",
                                                                            WhiteningSettings(seeds=2), "cpu"),
                        check_whitening),
    "channel axes": Served(jobs.channel_axes_job, lambda _: jobs.ChannelAxesRequest(
        "demo:tiny_vgg", (), "crops", 64, 40, ChannelSettings(layer=tiny_layer()), False, "cpu"), check_channels),
    "network pruning": Served(jobs.network_pruning_job, lambda _: jobs.NetworkPruningRequest(
        "demo:tiny_vgg", (), "crops", 64, 40, ("features.4", "features.7"), ChannelSettings(pruning=PruningSettings(
            criteria=("local", "target", "l1"), flops_targets=(0.1, 0.2), recovery_steps=2)), "cpu"),
        check_network_pruning),
    "rescore without labels": Served(jobs.rescore_job, lambda _: jobs.ScoringRequest(
        DEPTHWISE, (), "bundled", 11, RescoreSettings(replacements=("B",), batch_size=4), "cpu"),
        check_unlabelled_rescore),
    "rescore with labels": Served(jobs.rescore_job, labelled_sample, check_labelled_rescore),
    "master keys layer sweep": Served(jobs.layer_sweep_job, lambda _: jobs.ScoringRequest(
        DEPTHWISE, (), "bundled", 11, LayerSweepSettings(replacement="B", stages=(0, 1), batch_size=4), "cpu"),
        check_layer_sweep),
    "report": Served(jobs.report_job, lambda _: jobs.ReportRequest(((DEPTHWISE, ()),), ("",), ReportSettings(
        images=str(require_fixture(IMAGENET_SAMPLE)), max_images=6, seeds=2, max_eval_images=72, n_calibration=40,
        n_evaluation=16), "cpu"), check_report),
    "survey energy row": Served(jobs.survey_row_job, lambda _: jobs.SurveyRowRequest(
        "demo:tiny_vgg", SurveySettings(family="energy", seeds=2), "cpu"), check_survey_row, lane=Lane.LONG),
    "survey master keys row": Served(jobs.survey_row_job, lambda _: jobs.SurveyRowRequest(
        DEPTHWISE, SurveySettings(family="masterkeys"), "cpu"), check_survey_row, lane=Lane.LONG),
    "training lab": Served(jobs.training_job, training_request, check_training, graceful=True, lane=Lane.LONG),
}
"""Each job kind as a page submits it (:func:`fl_ui.memo.pooled`, :class:`fl_ui.jobs.TrainingJob`, the Survey page)."""


def test_every_job_kind_of_the_dashboard_is_tested_as_served() -> None:
    kinds = {name for name, function in inspect.getmembers(jobs, inspect.isfunction)
             if name.endswith("_job") and function.__module__ == jobs.__name__}
    assert kinds == {served.job.__name__ for served in SERVED.values()}


@pytest.mark.slow
def test_the_engines_workers_are_daemonic_processes(engine) -> None:
    """What the re-score's threads are for: a worker may not start processes (a DataLoader's workers)."""
    daemonic = engine.client.run(lambda: multiprocessing.current_process().daemon)
    assert daemonic and all(daemonic.values())


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SERVED))
def test_a_job_kind_runs_in_a_worker_process_on_more_than_one_batch(engine, kind: str, tmp_path: Path) -> None:
    served = SERVED[kind]
    job = engine.submit(served.job, served.request(tmp_path), graceful=served.graceful, lane=served.lane)
    state = job.join(timeout=900)
    assert state.state == "done", state.error
    assert state.worker.startswith("tls://127.0.0.1:")  # computed by a worker of the embedded cluster (on TLS)
    served.check(job.result())
