"""``filterlens env``: the versions and devices a bug report needs, and whether torch and torchvision work together;
a pair that does not fails the first analysis in one line that says what to install, not with torchvision's
``operator torchvision::nms does not exist``."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from fl_core.compute.environment import explained_import_error, pair_problem

from .conftest import REPO


def test_a_torch_and_torchvision_of_one_release_and_build_are_a_pair() -> None:
    assert pair_problem("2.14.1", "0.29.1") is None
    assert pair_problem("2.14.1+cu130", "0.29.1") is None  # the CUDA wheel of PyPI and of the CUDA index
    assert pair_problem("2.13.0+cpu", "0.28.0+cpu") is None
    assert pair_problem(metadata.version("torch"), metadata.version("torchvision")) is None  # this install


def test_another_release_or_a_cuda_build_beside_a_cpu_build_is_named_with_the_fix() -> None:
    assert "torchvision 0.27.1 is not the release of torch 2.13.0 (that is torchvision 0.28): pip install " \
           "'torchvision==0.28.*'" in pair_problem("2.13.0", "0.27.1")
    cpu_cuda = pair_problem("2.13.0+cpu", "0.28.0")  # the install: the CPU recipe, then a plain torchvision
    assert "different builds (torch for the CPU only, torchvision for CUDA)" in cpu_cuda
    assert "--index-url https://download.pytorch.org/whl/cpu" in cpu_cuda
    assert explained_import_error(RuntimeError("operator torchvision::nms does not exist")).startswith(
        "torch and torchvision do not work together (operator torchvision::nms does not exist).")
    assert explained_import_error(RuntimeError("CUDA out of memory")) is None


def run(arguments: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, cwd=REPO, env=environment,
                          timeout=300)


@pytest.mark.slow
def test_env_prints_the_versions_and_devices_and_passes_on_this_install() -> None:
    done = run(["-m", "fl_core", "env"])
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines() if line.strip())
    for name, distribution in (("torch", "torch"), ("torchvision", "torchvision"), ("timm", "timm"),
                               ("Dask", "dask")):
        assert lines[name] == metadata.version(distribution), name
    assert lines["FilterLens"].startswith("0.") and lines["Python"].startswith(".".join(map(str, sys.version_info[:2])))
    assert lines["devices"].startswith("cpu (")
    assert [line.split()[0] for line in done.stdout.splitlines()[-2:]] == ["ok", "ok"]


def broken_torchvision(folder: Path) -> dict[str, str]:
    """A torchvision 0.28.0 whose compiled operators fail as a mismatched build's do, first on the path."""
    package = folder / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    info = folder / "torchvision-0.28.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


@pytest.mark.slow
def test_a_broken_pair_fails_env_the_command_and_the_first_analysis_in_one_line(tmp_path: Path) -> None:
    env = broken_torchvision(tmp_path)
    paired = f"0.{int(metadata.version('torch').split('.')[1]) + 15}"
    checked = run(["-m", "fl_core", "env"], env)
    assert checked.returncode == 1 and "torchvision  0.28.0" in checked.stdout
    fails = [line for line in checked.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 2 and f"that is torchvision {paired}" in fails[0] and "torchvision::nms" in fails[1]
    command = run(["-m", "fl_core", "energy", "--model", "demo:tiny_vgg", "--quiet"], env)
    assert command.returncode == 2 and len(command.stderr.strip().splitlines()) == 1, command.stderr
    assert "torch and torchvision do not work together" in command.stderr and f"'torchvision=={paired}.*'" in (
        command.stderr)
    script = ("import fl_core\ntry:\n    fl_core.analyze_energy('demo:tiny_vgg')\n"
              "except fl_core.InstallError as err:\n    print(err)")
    library = run(["-c", script], env)
    assert library.returncode == 0 and library.stdout.startswith("torch and torchvision do not work together"), (
        library.stderr)
    assert len(library.stdout.strip().splitlines()) == 1 and "filterlens env" in library.stdout
