"""Model spec strings (README.md, "Models"; :mod:`fl_core.io.models` loads them): their forms, parsed into a
:class:`ModelSpec`, and the checks that need no loading (the text, the registry name, the file's path policy)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fl_core.errors import ModelSpecError
from fl_core.io.paths import check_readable
from fl_core.settings import path_text_problem, printable

SOURCES = ("timm", "torchvision", "cifar", "weights", "onnx", "demo")
FILE_SOURCES = ("weights", "onnx")
"""Spec sources that are just a file path (``weights:PATH``, ``onnx:PATH``): weights only."""
ARCHITECTURE_SOURCES = ("timm", "torchvision", "cifar")
"""Spec sources that name an architecture (``NAME``, ``NAME=PATH``; timm and torchvision also ``NAME@pretrained``)."""


def check_spec_text(spec: str) -> None:
    """Refuse a spec no file system or registry could resolve (:func:`fl_core.settings.path_text_problem`)."""
    if problem := path_text_problem(spec):
        shown = printable(spec[:60]).replace("\x00", "") + ("…" if len(spec) > 60 else "")
        raise ModelSpecError(f"The model spec '{shown}' cannot be used: {problem}. Check the spec.")


@dataclass(frozen=True)
class ModelSpec:
    """A parsed spec string."""

    source: str
    name: str = ""
    path: str | None = None
    pretrained: bool = False

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        """Parse ``timm:NAME[@pretrained|=PATH]``, ``torchvision:...``, ``cifar:NAME[=PATH]``, ``weights:PATH``,
        ``onnx:PATH`` or ``demo:NAME``."""
        check_spec_text(spec)
        source, sep, rest = spec.strip().partition(":")
        if not sep or source not in SOURCES or not rest:
            raise ModelSpecError(f"'{spec}' is not a model spec. Use timm:NAME, timm:NAME@pretrained, timm:NAME=PATH, "
                                 "torchvision:NAME (same forms), cifar:resnet56[=PATH], weights:PATH, onnx:PATH or "
                                 "demo:NAME.")
        if source in FILE_SOURCES:
            return cls(source, name=Path(rest).name, path=rest)
        name, eq, path = (rest, "", "") if source == "demo" else rest.partition("=")
        if not name.isascii():  # int() reads other scripts' digits: cifar:resnet٥٦ would be resnet56
            raise ModelSpecError(f"'{printable(spec[:80])}': architecture and demo names are ASCII (letters, the "
                                 "digits 0-9, '_', '-', '.'); give the name as the registry spells it.")
        if source == "demo":
            return cls(source, name=rest)
        if eq:
            if not path:
                raise ModelSpecError(f"'{spec}': nothing after '='. Give the path of the state-dict file.")
            return cls(source, name=name, path=path)
        if name.endswith("@pretrained"):
            return cls(source, name=name[: -len("@pretrained")], pretrained=True)
        if "@" in name:
            raise ModelSpecError(f"'{spec}': the only tag after '@' is 'pretrained'.")
        return cls(source, name=name)

    def __str__(self) -> str:
        if self.source in FILE_SOURCES:
            return f"{self.source}:{self.path}"
        if self.source == "demo":
            return f"demo:{self.name}"
        suffix = f"={self.path}" if self.path else ("@pretrained" if self.pretrained else "")
        return f"{self.source}:{self.name}{suffix}"


def check_registry_name(source: str, name: str) -> None:
    """Refuse an architecture name that ``source`` (``timm`` or ``torchvision``) does not register, before anything
    is built (timm: with close names)."""
    if source == "timm":
        import timm

        if not timm.is_model(name.split(".")[0]) and not name.startswith("hf-hub:"):
            close = timm.list_models(f"*{name.split('.')[0][:6]}*")[:5]
            raise ModelSpecError(f"timm has no architecture '{name}'." + (f" Close names: {', '.join(close)}."
                                                                          if close else " See timm.list_models()."))
    elif source == "torchvision":
        import torchvision

        if name not in torchvision.models.list_models():
            raise ModelSpecError(f"torchvision has no classification model '{name}'. See "
                                 "torchvision.models.list_models().")


def check_spec(spec: str) -> ModelSpec:
    """The parsed spec, once everything that can be checked without loading it holds: its form, its registry name,
    and its file under the path policy (:func:`fl_core.io.paths.check_readable`).

    Raises:
        ModelSpecError, DataError: with a message for the user.
    """
    parsed = ModelSpec.parse(spec)
    check_registry_name(parsed.source, parsed.name)
    if parsed.path:
        check_readable(parsed.path)
    return parsed


def spec_file_stamp(spec: str) -> str:
    """Modification time and size of a spec's file ("" when it names none), so an edited file is reloaded; a file
    users may not read is refused (:func:`fl_core.io.paths.check_readable`) before any cache is asked for it."""
    path = ModelSpec.parse(spec).path
    if path and check_readable(path).is_file():
        stat = Path(path).stat()
        return f"{stat.st_mtime_ns}:{stat.st_size}"
    return ""


def is_random_init_spec(spec: str) -> bool:
    """Whether ``spec`` names a registry architecture at random init (no weights file, not ``@pretrained``), whose
    weights :func:`load_random_init` can draw from any seed."""
    try:
        parsed = ModelSpec.parse(spec)
    except ModelSpecError:
        return False
    return parsed.source in ARCHITECTURE_SOURCES and parsed.path is None and not parsed.pretrained
