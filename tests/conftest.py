"""Shared fixtures: tiny deterministic models, the demo checkpoints, and the real third-party fixtures.

Real fixtures live in ``../shared/fixtures`` next to the checkout (``FL_FIXTURES`` overrides the location). Tests
that use them go through :func:`require_fixture`: outside CI they skip with a clear reason when a fixture is absent;
with ``CI=true`` (:func:`fixtures_required`) they fail instead, so a green CI run always includes the real-data checks.
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import sys
import time
from pathlib import Path

import pytest
import torch

from fl_core.io.images import bundled_images
from fl_core.io.models import load_model
from fl_ui.testing import page_app  # noqa: F401  (re-exported for page tests)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("FL_FIXTURES", REPO.parent / "shared" / "fixtures"))
CHECKPOINTS = FIXTURES / "checkpoints"
IMAGENET_SAMPLE = FIXTURES / "imagenet-sample"

SQUEEZENET_SPEC = f"torchvision:squeezenet1_0={CHECKPOINTS / 'squeezenet1_0_imagenet.pt'}"
MOBILENET_SPEC = f"torchvision:mobilenet_v2={CHECKPOINTS / 'mobilenet_v2_imagenet.pt'}"
MOBILENET_OVERRIDES = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
RESNET20_SPEC = f"weights:{CHECKPOINTS / 'resnet20_cifar10.th'}"
RESNET20_OVERRIDES = {"input_size": 32, "crop_pct": 1.0}
TINY_MODELS = "demo:tiny_vgg,demo:tiny_vgg_init"
"""The tiny demo and its initialization as the URL's ``models``: page tests about other things stay quick (the
sidebar's default is a real ImageNet SqueezeNet at 224 px)."""


CHROMIUM = Path(os.environ.get("FL_CHROMIUM", "/usr/bin/chromium"))
"""Debian's Chromium (never a browser download)."""
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def fixtures_required() -> bool:
    """True under CI (``CI=true``): a missing real fixture is then a failure, not a skip."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def require_fixture(path: Path) -> Path:
    """``path`` when the real fixture exists; otherwise skip (locally) or fail (under CI) with the reason."""
    if not path.exists():
        reason = f"real fixture {path} is absent (set FL_FIXTURES or place ../shared/fixtures next to the repo)"
        if fixtures_required():
            pytest.fail(f"{reason}; CI=true requires the real fixtures")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium: without it browser tests skip locally and fail under ``CI=true``."""
    if not CHROMIUM.exists():
        reason = f"Chromium is not installed at {CHROMIUM} (Debian: apt-get install chromium; .ci/run does it)"
        if fixtures_required():
            pytest.fail(reason + " — the browser tests must run in CI")
        pytest.skip(reason)
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium: Path):
    """The test module's one Chromium, driven by Playwright's sync API (which allows one instance per thread: a test
    that started its own beside this one failed with "Sync API inside the asyncio loop"). Per module, not per
    session: while Playwright runs, its event loop is the main thread's running loop, and the later tests' own
    ``asyncio.run`` failed with "cannot be called from a running event loop"."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def imagenet_sample() -> Path:
    """The 1000-image, one-per-class ImageNet sample tree (ImageFolder layout)."""
    return require_fixture(IMAGENET_SAMPLE)


@pytest.fixture(scope="session")
def squeezenet():
    """Real SqueezeNet 1.0 ImageNet weights as ``torchvision:squeezenet1_0=PATH``."""
    require_fixture(CHECKPOINTS / "squeezenet1_0_imagenet.pt")
    return load_model(SQUEEZENET_SPEC)


@pytest.fixture(scope="session")
def mobilenet():
    """Real ImageNet MobileNetV2 (17 depthwise 3×3 layers), preprocessing mean/std 0.5 as its README says."""
    require_fixture(CHECKPOINTS / "mobilenet_v2_imagenet.pt")
    return load_model(MOBILENET_SPEC, input_overrides=MOBILENET_OVERRIDES)


@pytest.fixture(scope="session")
def resnet20():
    """Real CIFAR-10 ResNet-20 (akamaster) loaded weights-only, 32-px input."""
    require_fixture(CHECKPOINTS / "resnet20_cifar10.th")
    return load_model(RESNET20_SPEC, input_overrides=RESNET20_OVERRIDES)


@pytest.fixture(scope="session")
def demo():
    """The shipped demo model (trained) and its initialization."""
    return load_model("demo:tiny_vgg"), load_model("demo:tiny_vgg_init")


@pytest.fixture(scope="session")
def photos():
    """The bundled natural photos (offline)."""
    return bundled_images()


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _main_module_kept():
    """Streamlit's script runner (AppTest's too) leaves the page it ran as ``__main__``; a later test that spawns
    processes would have them run that page."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


SLOW_CPU_S = 1.0
"""A test that takes more CPU than this (its own process's and its finished subprocesses', set-up included) is marked
slow; :func:`pytest_terminal_summary` lists those that are not."""


SHARED_PACKAGES = {"io"}
"""Packages that hold a family's entry point among what every family uses (fl_core.io: models, images, layers)."""


def family_keywords() -> dict[str, set[str]]:
    """Per registered family (:mod:`fl_core.families`), the words that name it in a test's path, name or parameters:
    its name, its command's name and the package of its entry point (``channelaxes``, ``firstlayer``, ``lab``), so its
    package's tests, its contract checks (``[energy]``), its command's tests and its page's (``test_master_keys``)."""
    from fl_core.families import FAMILIES

    keywords = {}
    for name, family in FAMILIES.items():
        package = family.function.split(":")[0].split(".")[1]
        keywords[name] = {name, *([family.command.rsplit(".", 1)[-1]] if family.command else []),
                          *([package] if package not in SHARED_PACKAGES else [])}
    return keywords


def words_of(nodeid: str) -> set[str]:
    """The words of a test id, each alone and joined to the next (``test_master_keys.py`` gives ``masterkeys``)."""
    parts = [part for part in re.split(r"[^a-z0-9]+", nodeid.lower()) if part]
    return set(parts) | {first + second for first, second in itertools.pairwise(parts)}


def pytest_configure(config: pytest.Config) -> None:
    """One marker per registered family, ``family_<name>``: ``python -m pytest -m family_channels`` runs every test of
    a family (its package's tests, its contract checks, its command, its page; DEVELOPING.md)."""
    for name in family_keywords():
        config.addinivalue_line("markers", f"family_{name}: the tests of the {name} family (set by tests/conftest.py)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests are slow tests too (``-m "not slow"`` is the fast loop, DEVELOPING.md), and each test carries the
    marker of every family its path, name or parameters name (:func:`family_keywords`)."""
    keywords = family_keywords()
    for item in items:
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.slow)
        words = words_of(item.nodeid)
        for name, named in keywords.items():
            if words & named:
                item.add_marker(getattr(pytest.mark, f"family_{name}"))


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished subprocesses."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


_UNMARKED_SLOW: list[tuple[str, float]] = []
"""(test id, CPU seconds) of the tests without the slow marker over :data:`SLOW_CPU_S`."""
_SETUP_CPU: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    began = _cpu_seconds()
    yield
    _SETUP_CPU[item.nodeid] = _cpu_seconds() - began


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Measure each test's CPU seconds, its set-up's included (not its tear-down's: a package's engine is closed, and
    its processes' CPU counted, in the tear-down of whichever test ran last); keep those of unmarked tests over
    :data:`SLOW_CPU_S`. CPU, not wall time: the machine may be busy with other work."""
    began = _cpu_seconds()
    yield
    seconds = _SETUP_CPU.pop(item.nodeid, 0.0) + _cpu_seconds() - began
    if seconds > SLOW_CPU_S and item.get_closest_marker("slow") is None:
        _UNMARKED_SLOW.append((item.nodeid, seconds))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """List the tests without the ``slow`` marker that took more than :data:`SLOW_CPU_S` of CPU: mark them slow."""
    slow = sorted(((seconds, nodeid) for nodeid, seconds in _UNMARKED_SLOW), reverse=True)
    if slow:
        terminalreporter.section(f"unmarked tests over {SLOW_CPU_S:g} s of CPU: mark them @pytest.mark.slow")
        for seconds, nodeid in slow:
            terminalreporter.write_line(f"{seconds:6.1f} s CPU  {nodeid}")
