"""The models of a survey: specs, registry name patterns, text files of specs and folders of checkpoints.

A pattern is a registry spec whose name holds a shell wildcard (``*``, ``?``, ``[``): ``timm:convnext_*`` is every
timm ConvNeXt at random init, ``timm:resnet*@pretrained`` every timm ResNet that has registry weights (loaded from
the hub or its local cache: where they are unreachable, that model's row says so), ``torchvision:vgg*`` every
torchvision VGG, ``cifar:resnet*`` the CIFAR ResNets of the paper (20 to 1202 layers).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from pathlib import Path

from fl_core.errors import DataError, ModelSpecError

PATTERN_CHARS = "*?["
PRETRAINED = "@pretrained"


def is_pattern(spec: str) -> bool:
    return any(char in spec for char in PATTERN_CHARS)


def registry_names(source: str, pattern: str, pretrained: bool) -> list[str]:
    """Architecture names of ``source`` (``timm``, ``torchvision`` or ``cifar``) matching ``pattern`` (with weights,
    if ``pretrained``), sorted (CIFAR ResNets by depth)."""
    if source == "timm":
        import timm

        return sorted(dict.fromkeys(name.split(".")[0] for name in timm.list_models(pattern, pretrained=pretrained)))
    if source == "torchvision":
        import torchvision

        names = [name for name in torchvision.models.list_models() if fnmatch.fnmatchcase(name, pattern)]
        return sorted(name for name in names if not pretrained or torchvision.models.get_model_weights(name))
    if source == "cifar" and not pretrained:
        from fl_core.io.cifar import CIFAR_BLOCKS

        return sorted((name for name in CIFAR_BLOCKS if fnmatch.fnmatchcase(name, pattern)), key=CIFAR_BLOCKS.get)
    raise ModelSpecError(f"'{source}:{pattern}': name patterns work for timm:, torchvision: and cifar: specs only "
                         "(cifar: without @pretrained).")


def expand_spec(spec: str) -> list[str]:
    """A spec as it is, or a registry name pattern as the specs it matches.

    Raises:
        ModelSpecError: a pattern that matches nothing, or one of another source.
    """
    spec = spec.strip()
    if not is_pattern(spec):
        return [spec]
    source, _, rest = spec.partition(":")
    pretrained = rest.endswith(PRETRAINED)
    pattern = rest.removesuffix(PRETRAINED)
    names = registry_names(source, pattern, pretrained)
    if not names:
        raise ModelSpecError(f"No {source} architecture matches '{pattern}'"
                             + (" with registry weights" if pretrained else "") + ". Check the pattern.")
    return [f"{source}:{name}{PRETRAINED if pretrained else ''}" for name in names]


def specs_in_text(text: str) -> list[str]:
    """The specs (or patterns) of a text, one a line; blank lines and ``#`` comments are skipped."""
    return [kept for line in text.splitlines() if (kept := line.split("#", 1)[0].strip())]


def specs_in_file(path: str | Path) -> list[str]:
    """The specs (or patterns) of a text file (:func:`specs_in_text`)."""
    try:
        return specs_in_text(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"Cannot read the list of models {path}: {err}.") from err


def checkpoints_in_folder(folder: str | Path) -> list[str]:
    """``weights:FILE`` for every checkpoint file directly in ``folder``, in natural order."""
    from fl_core.report.series import checkpoint_files

    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder. Give a folder of checkpoint files.")
    return [f"weights:{path}" for path in checkpoint_files(folder)]


def survey_models(models: Iterable[str] = (), files: Sequence[str | Path] = (), folders: Sequence[str | Path] = (),
                  *, limit: int) -> tuple[str, ...]:
    """Every model of a survey, in the order given, each once: ``models`` (specs or patterns), then the specs of each
    text file, then the checkpoints of each folder.

    Raises:
        DataError: no model, or more than ``limit``.
        ModelSpecError: a pattern matching nothing.
    """
    given = [*models, *(spec for path in files for spec in specs_in_file(path))]
    specs = [*(spec for entry in given for spec in expand_spec(entry)),
             *(spec for folder in folders for spec in checkpoints_in_folder(folder))]
    unique = tuple(dict.fromkeys(specs))
    if not unique:
        raise DataError("A survey needs at least one model: give --model, --models-file or --folder.")
    if len(unique) > limit:
        raise DataError(f"The survey would hold {len(unique)} models, more than its limit of {limit} (max_models). "
                        "Narrow the pattern or raise the limit.")
    return unique
