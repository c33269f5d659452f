"""Multi-user safety: many sessions change weights at the same time on one shared, cached model.

Streamlit serves every session from one process, and the model cache (``fl_ui.cache.MODELS``) hands all of them
the same :class:`~fl_core.io.models.LoadedModel`. These tests run sessions concurrently (threads released together by
a barrier, and AppTest sessions) and prove that filter swaps + re-scoring and training happen on private copies: every
session gets exactly the numbers it gets when it runs alone, and the cached weights' hash never changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from fl_core.io.checkpoints import save_state_dict
from fl_core.io.crops import CropSettings, photo_crops
from fl_core.io.images import folder_images
from fl_core.io.layers import first_conv_name
from fl_core.lab.train import TrainSettings, evaluate, train_classifier
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.rescore import rescore
from fl_core.masterkeys.swap import swap_filters, swapped_model
from fl_ui.cache import get_model
from fl_ui.testing import page_app, shown

from .app_pages import app_pages
from .conftest import CHECKPOINTS, MOBILENET_OVERRIDES, MOBILENET_SPEC, REPO, TINY_MODELS, require_fixture

SESSIONS = 4
SMALL_INPUT = {**MOBILENET_OVERRIDES, "input_size": 64, "crop_pct": 1.0}
"""MobileNetV2 at 64 px: its 17 depthwise layers at a size two shared CPU cores score quickly."""


def weights_hash(loaded) -> str:
    """SHA-256 over every tensor of the cached model (names, shapes, bytes), plus its train/grad flags."""
    digest = hashlib.sha256()
    for name, tensor in sorted(loaded.state_dict.items()):
        digest.update(name.encode() + str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    model = loaded.model
    digest.update(repr((model.training, any(p.requires_grad for p in model.parameters()))).encode())
    return digest.hexdigest()


def run_together(jobs: list[Callable[[], object]]) -> list[object]:
    """Run the jobs in threads released at the same moment; re-raise the first failure."""
    barrier = threading.Barrier(len(jobs))

    def start(job: Callable[[], object]) -> object:
        barrier.wait()
        return job()

    with ThreadPoolExecutor(len(jobs)) as pool:
        return [future.result() for future in [pool.submit(start, job) for job in jobs]]


def scores(result) -> list[tuple]:
    """What a user reads off a re-scoring: every variant's accuracy, loss, agreement and KL."""
    rows = [("original", result.top1, result.top5, result.loss)]
    return rows + [(s.method, s.top1, s.top5, s.loss, s.agreement, s.kl, s.relative_error) for s in result.swaps]


@pytest.fixture(scope="module")
def shared_mobilenet():
    """The real ImageNet MobileNetV2 through the app's own shared cache (``fl_ui.cache.get_model``)."""
    require_fixture(CHECKPOINTS / "mobilenet_v2_imagenet.pt")
    overrides = tuple(sorted(SMALL_INPUT.items()))
    return get_model(MOBILENET_SPEC, overrides), overrides


@pytest.fixture(scope="module")
def sample_images(imagenet_sample):
    """8 labelled ImageNet validation-layout images, spread over the classes."""
    return folder_images(imagenet_sample, limit=8)


@pytest.mark.slow
def test_concurrent_swaps_and_rescoring_never_leak_between_sessions(shared_mobilenet, sample_images) -> None:
    loaded, overrides = shared_mobilenet
    before = weights_hash(loaded)
    bank = depthwise_bank(loaded)
    plans = [("B", 0), ("random", 1), ("random", 2), ("keep", 0)]
    swaps = [swap_filters(bank, replacement, seed=seed) for replacement, seed in plans]

    def session(i: int):
        shared = get_model(MOBILENET_SPEC, overrides)
        private = swapped_model(shared, swaps[i])
        result = rescore(shared, sample_images, swaps=[swaps[i]], device="cpu", batch_size=8, workers=0)
        mine = {key: private.get_parameter(key).detach().flatten(1) for key in swaps[i].weights}
        return shared, mine, result

    alone = [session(i)[2] for i in range(SESSIONS)]
    together = run_together([lambda i=i: session(i) for i in range(SESSIONS)])

    assert all(shared is loaded for shared, _, _ in together)  # one cached object served every session
    for i, (_, mine, result) in enumerate(together):
        assert scores(result) == scores(alone[i]), f"session {i} saw another session's weights"
        for key, filters in mine.items():  # its private copy holds its own swap, not another session's
            assert torch.equal(filters, swaps[i].weights[key].flatten(1))
    assert weights_hash(loaded) == before
    # the sessions really differed, so a leak would have shown: the control agrees with the original everywhere,
    # the random swaps do not, and two random seeds give two different models
    keep, random_1, random_2 = together[3][2].swaps[0], together[1][2].swaps[0], together[2][2].swaps[0]
    assert keep.agreement == 1.0 and keep.kl < 1e-9 and keep.relative_error == 0.0
    assert random_1.agreement < 1.0 and random_1.kl > 0.01 and random_1.kl != random_2.kl


@pytest.mark.slow
def test_concurrent_training_and_lesions_work_on_private_copies() -> None:
    """Training Lab and lesion-style changes: several sessions train / zero filters of copies of one cached model."""
    trained = get_model("demo:tiny_vgg")
    before = weights_hash(trained)
    data = photo_crops(CropSettings(train_per_photo=24, val_stride=16))
    first = first_conv_name(trained)

    def train_session(seed: int) -> tuple[float, torch.Tensor]:
        model = get_model("demo:tiny_vgg").copy_model()
        torch.manual_seed(seed)
        history = train_classifier(model, data.train_x, data.train_y, data.val_x, data.val_y, data.normalize,
                                   model.get_submodule(first), TrainSettings(steps=6, batch_size=32, seed=seed,
                                                                           eval_every=6), device="cpu")
        return history.val_loss[-1], model.get_submodule(first).weight.detach().clone()

    def lesion_session(channel: int) -> tuple[float, torch.Tensor]:
        model = get_model("demo:tiny_vgg").copy_model()
        with torch.no_grad():
            model.get_submodule(first).weight[channel].zero_()
        loss, _ = evaluate(model, data.val_x, data.val_y, data.normalize, torch.device("cpu"))
        return loss, model.get_submodule(first).weight.detach().clone()

    jobs = [lambda: train_session(1), lambda: train_session(2), lambda: lesion_session(0), lambda: lesion_session(3)]
    alone = [job() for job in jobs]
    together = run_together(jobs)
    for i, ((loss, weight), (loss_alone, weight_alone)) in enumerate(zip(together, alone)):
        assert loss == pytest.approx(loss_alone, rel=1e-6, abs=1e-9), f"session {i} was disturbed"
        assert torch.allclose(weight, weight_alone, atol=1e-6)
    assert weights_hash(trained) == before
    lesioned = together[2][1]
    assert not lesioned[0].any() and lesioned[3].any() and together[3][1][0].any()  # each zeroed only its own filter


def _session(**query: str) -> AppTest:
    """A new browser session: the default page behind the real sidebar."""
    app = page_app(app_pages()[0].path, **query).run()
    assert not app.exception
    return app


CIFAR_UPLOAD = "cifar:resnet20="  # how an uploaded resnet20_cifar10.th is added (fl_core.io.models.recognised_spec)


@pytest.mark.slow
def test_sessions_keep_their_own_selection_and_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two browser sessions: one user's upload and model choice never appear in the other's sidebar."""
    checkpoint = require_fixture(CHECKPOINTS / "resnet20_cifar10.th")
    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.chdir(REPO)
    alice, bob = _session(models="demo:tiny_vgg"), _session(models=TINY_MODELS)
    alice.file_uploader(key="ckpt_upload").set_value((checkpoint.name, checkpoint.read_bytes(), "application/x"))
    alice.button(key="ckpt_add").click().run()
    bob.run()
    # a CIFAR checkpoint uploaded without an architecture is recognised as one (cifar:resnet20=PATH), and said so
    # in the uploader's sidebar only
    uploaded = [s for s in alice.session_state["model_picker"] if s.startswith(CIFAR_UPLOAD)]
    assert len(uploaded) == 1 and not alice.sidebar.error
    assert any("cifar:resnet20" in shown(info) for info in alice.sidebar.info)
    assert not any("cifar:resnet20" in shown(info) for info in bob.sidebar.info)
    assert alice.session_state["selection"].specs == ("demo:tiny_vgg", uploaded[0])
    assert bob.session_state["selection"].specs == ("demo:tiny_vgg", "demo:tiny_vgg_init")
    assert uploaded[0] not in bob.multiselect(key="model_picker").options
    assert "cifar:" not in str(bob.query_params["models"])
    # the same bytes uploaded by Bob under another name: his name, beside Alice's file in the folder of their content
    bob.file_uploader(key="ckpt_upload").set_value(("renamed.th", checkpoint.read_bytes(), "application/x"))
    bob.button(key="ckpt_add").click().run()
    renamed = [s for s in bob.session_state["model_picker"] if s.startswith(CIFAR_UPLOAD)]
    assert len(renamed) == 1 and not bob.sidebar.error
    alices, bobs = Path(uploaded[0].removeprefix(CIFAR_UPLOAD)), Path(renamed[0].removeprefix(CIFAR_UPLOAD))
    assert bobs.name == "renamed.th" and bobs.parent == alices.parent and alices.exists()
    assert renamed[0] not in alice.run().multiselect(key="model_picker").options
    assert get_model(renamed[0]).sha256 == get_model(uploaded[0]).sha256


def test_cached_models_follow_file_content(tmp_path: Path) -> None:
    """The model cache is keyed by spec + file stamp: a file replaced on the server is reloaded, not served stale."""
    path = tmp_path / "weights.safetensors"
    first = {"conv.weight": torch.ones(4, 3, 3, 3)}
    save_state_dict(first, path)
    old = get_model(f"weights:{path}")
    assert get_model(f"weights:{path}") is old
    save_state_dict({"conv.weight": torch.full((4, 3, 3, 3), 2.0), "conv.bias": torch.zeros(4)}, path)
    new = get_model(f"weights:{path}")
    assert new is not old and new.sha256 != old.sha256
    assert float(new.state_dict["conv.weight"].mean()) == 2.0 and float(old.state_dict["conv.weight"].mean()) == 1.0
    assert dataclasses.is_dataclass(new)
