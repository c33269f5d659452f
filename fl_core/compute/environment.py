"""What FilterLens runs on, and whether torch and torchvision were installed as a pair (``filterlens env``).

torchvision's compiled operators (``torchvision::nms`` and the others) load only into the torch build they were
compiled for. A torchvision of another release (torchvision ``0.N`` pairs with torch ``2.(N − 15)``), or a CUDA build of
torchvision beside a CPU build of torch (``pip install torch --index-url .../whl/cpu``, then a plain ``pip install
torchvision``), fails at ``import torchvision`` with ``operator torchvision::nms does not exist``: every analysis and
the dashboard then die, while ``--help`` still works. :func:`pair_problem` tells from the installed versions alone
(package metadata, nothing imported), :func:`operator_problem` by loading the operators; :func:`explained_import_error`
turns the failure of an analysis's first import into one line saying what to install.

This module imports nothing heavy at its top: the command line's ``--help`` reads it.
"""

from __future__ import annotations

import importlib.util
import platform
import re
import sys
from importlib import metadata

PACKAGES = {"torch": "torch", "torchvision": "torchvision", "timm": "timm", "Dask": "dask",
            "distributed": "distributed", "Streamlit": "streamlit"}
"""What ``filterlens env`` reports: shown name → distribution name."""
TORCHVISION_OFFSET = 15
"""torchvision ``0.N`` is released with torch ``2.(N − 15)`` (0.15 with 2.0, 0.24 with 2.9, 0.29 with 2.14)."""
OPERATOR_FAILURE = re.compile(r"torchvision::\w+|torchvision\._C")
"""What an error of torchvision's compiled operators says."""


def installed(distribution: str) -> str | None:
    """The installed version of a distribution (its metadata; nothing imported), ``None`` when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def release(version: str) -> tuple[int, ...]:
    """``(major, minor)`` of a version string (``2.13.0+cpu`` → ``(2, 13)``)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:2])


def local_build(version: str) -> str:
    """The build tag of a version (``2.13.0+cpu`` → ``cpu``, ``2.14.1`` → ``""``)."""
    return version.partition("+")[2]


def pair_problem(torch_version: str | None = None, torchvision_version: str | None = None) -> str | None:
    """Why the installed torch and torchvision (or the versions given) are not a pair, in one sentence with the fix;
    ``None`` when they are (or one of them is not installed)."""
    torch_version = torch_version or installed("torch")
    torchvision_version = torchvision_version or installed("torchvision")
    if not torch_version or not torchvision_version:
        return None
    torch_release, vision_release = release(torch_version), release(torchvision_version)
    if len(torch_release) == 2 and len(vision_release) == 2 and torch_release[0] == 2 and vision_release[0] == 0:
        paired = (0, torch_release[1] + TORCHVISION_OFFSET)
        if vision_release != paired:
            return (f"torchvision {torchvision_version} is not the release of torch {torch_version} (that is "
                    f"torchvision {paired[0]}.{paired[1]}): pip install 'torchvision=={paired[0]}.{paired[1]}.*' "
                    "from the index torch came from.")
    torch_build, vision_build = local_build(torch_version), local_build(torchvision_version)
    if (torch_build == "cpu") != (vision_build == "cpu"):
        cpu, other = ("torch", "torchvision") if torch_build == "cpu" else ("torchvision", "torch")
        return (f"torch {torch_version} and torchvision {torchvision_version} are different builds ({cpu} for the CPU "
                f"only, {other} for CUDA): install both from the same index, e.g. pip install torch torchvision "
                "--index-url https://download.pytorch.org/whl/cpu")
    return None


def operator_problem() -> str | None:
    """Why torchvision's compiled operators do not load (importing torchvision and running ``nms`` on no boxes), in
    one line; ``None`` when they load."""
    try:
        import torch
        import torchvision

        torchvision.ops.nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    except Exception as err:  # any failure to import or to run the operator is the answer
        return f"torchvision's operators do not load: {type(err).__name__}: {' '.join(str(err).split())[:300]}"
    return None


def explained_import_error(error: BaseException) -> str | None:
    """One line saying what to install when ``error`` (raised while an analysis imported its modules) comes from a
    torch / torchvision pair that does not match; ``None`` for any other error."""
    problem = pair_problem()
    if problem is None and not OPERATOR_FAILURE.search(str(error)):
        return None
    cause = " ".join(str(error).split())[:200]
    fix = problem or "Reinstall torchvision from the index torch came from."
    return f"torch and torchvision do not work together ({cause}). {fix} 'filterlens env' checks the install."


def warn_pair() -> None:
    """Warn in one line (a :class:`UserWarning`) when the installed torch and torchvision are not a pair although
    torchvision loaded (the first analysis of a session calls this)."""
    problem = pair_problem()
    if problem is not None:
        import warnings

        warnings.warn(f"{problem} 'filterlens env' checks the install.", UserWarning, stacklevel=3)


def text_progress_bars() -> None:
    """In a Jupyter kernel without ipywidgets, import ``tqdm.auto`` once with its ``IProgress not found`` warning
    silenced: huggingface_hub (which timm loads) imports it and would print that warning into the notebook; its bars
    then draw as text, as FilterLens's own do there (:func:`fl_core.compute.progress.progress_bar`)."""
    if "ipykernel" not in sys.modules or importlib.util.find_spec("ipywidgets") is not None:
        return
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import tqdm.auto  # noqa: F401  (imported for its side effect: the module is cached without the warning)


def check_operators() -> None:
    """Raise :class:`~fl_core.errors.InstallError` with the fix when torchvision's operators do not load (before a
    server starts, where the failure would otherwise come with the first page)."""
    problem = operator_problem()
    if problem is not None:
        from fl_core.errors import InstallError

        fix = pair_problem() or "Reinstall torchvision from the index torch came from."
        raise InstallError(f"{problem}. {fix} 'filterlens env' checks the install.")


def environment_report() -> tuple[list[tuple[str, str]], list[tuple[bool, str]]]:
    """``(versions, checks)``: (name, version or ``not installed``) of FilterLens, Python and :data:`PACKAGES`, the
    devices; (passed, what) of each check: torch and torchvision a pair, torchvision's operators loading."""
    from fl_core import __version__

    versions = [("FilterLens", __version__), ("Python", f"{platform.python_version()} ({sys.executable})")]
    versions += [(name, installed(dist) or "not installed") for name, dist in PACKAGES.items()]
    versions.append(("devices", devices_text()))
    pair = pair_problem()
    operators = operator_problem() if installed("torchvision") else "torchvision is not installed"
    return versions, [
        (pair is None, pair or f"torch {installed('torch')} and torchvision {installed('torchvision')} are a pair"),
        (operators is None, operators or "torchvision's operators load (torchvision::nms ran)")]


def devices_text() -> str:
    """The devices torch sees (``cpu (2 threads), cuda:0 NVIDIA H100``), or why torch does not load."""
    try:
        import torch
    except Exception as err:  # a broken torch is reported, not raised
        return f"torch does not load: {type(err).__name__}: {err}"
    names = [f"cpu ({torch.get_num_threads()} threads)"]
    if torch.cuda.is_available():
        names += [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    elif torch.version.cuda:
        names.append(f"no GPU visible (torch built for CUDA {torch.version.cuda})")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        names.append("mps")
    return ", ".join(names)
