"""The models of a survey: specs, registry name patterns, text files of specs and folders of checkpoints.

A pattern is a registry spec whose name holds a shell wildcard (``*``, ``?``, ``[``): ``timm:convnext_*`` is every
timm ConvNeXt at random init, ``timm:resnet*@pretrained`` every timm ResNet that has registry weights (loaded from
the hub or its local cache: where they are unreachable, that model's row says so), ``torchvision:vgg*`` every
torchvision VGG, ``cifar:resnet*`` the CIFAR ResNets of the paper (20 to 1202 layers).
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from fl_core.errors import DataError, FilterLensError, ModelSpecError
from fl_core.io.paths import check_readable

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
        return specs_in_text(check_readable(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"Cannot read the list of models {path}: {err}.") from err


def checkpoints_in_folder(folder: str | Path) -> list[str]:
    """``weights:FILE`` for every checkpoint file directly in ``folder``, in natural order."""
    from fl_core.report.series import checkpoint_files

    folder = check_readable(folder)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder. Give a folder of checkpoint files.")
    return [f"weights:{path}" for path in checkpoint_files(folder)]


def survey_models(models: Iterable[str] = (), files: Sequence[str | Path] = (), folders: Sequence[str | Path] = (),
                  *, limit: int, loaded: Collection[str] = ()) -> tuple[str, ...]:
    """Every model of a survey, in the order given, each once: ``models`` (specs or patterns), then the specs of each
    text file, then the checkpoints of each folder. Repeated entries are dropped before any pattern is expanded, the
    count is bounded as the list grows, and every spec is checked (its form, its registry name, its file under the path
    policy: :func:`fl_core.io.specs.check_spec`) before anything is loaded, but those of ``loaded``: models a script
    passed as objects (``LoadedModel.spec``), which nothing reads.

    Raises:
        DataError: no model, more than ``limit``, or a file users may not read.
        ModelSpecError: a pattern matching nothing, a malformed spec, an architecture its registry does not have.
    """
    entries = (entry.strip() for entry in itertools.chain(models, *map(specs_in_file, files)))
    given = dict.fromkeys(filter(None, entries))
    unique: dict[str, None] = {}
    for found in itertools.chain(map(expand_spec, given), map(checkpoints_in_folder, folders)):
        unique.update(dict.fromkeys(found))
        if len(unique) > limit:
            raise DataError(f"The survey would hold more than its limit of {limit} models (max_models). Narrow the "
                            "pattern or raise the limit.")
    if not unique:
        raise DataError("A survey needs at least one model: give --model, --models-file or --folder.")
    _check_specs(tuple(spec for spec in unique if spec not in loaded))
    return tuple(unique)


def _check_specs(specs: tuple[str, ...]) -> None:
    """Refuse the survey when a spec cannot load whatever the worker does (:func:`fl_core.io.specs.check_spec`: its
    form, its registry name, its file under the path policy): the first refusal, with the count of the others."""
    from fl_core.io.specs import check_spec

    refused = []
    for spec in specs:
        try:
            check_spec(spec)
        except FilterLensError as err:
            refused.append(err)
    if len(refused) == 1:
        raise refused[0]
    if refused:
        raise type(refused[0])(f"{len(refused):,} of the {len(specs):,} models cannot be surveyed. The first: "
                               f"{refused[0]}")
