"""Command line: ``python -m fl_core <analysis> --model SPEC [--model SPEC ...] [options] [--json PATH] [--csv PATH]``.

Each command is a module of this package with ``add_arguments(parser)`` and ``run(args, progress) -> Result``: the
command of each registered analysis family (:mod:`fl_core.families`), and the tools of :data:`TOOLS` (``app``). The
modules import only settings at their top, so ``--help`` and a refused option answer without loading torch. The
result's ``to_dict()`` goes to ``--json``, its ``to_csv()`` (the table, no cell a spreadsheet runs) to ``--csv``, and a
short summary to stdout; an output path is checked under the path policy before the analysis runs. ``-`` as an
output path (``--json -``, ``--csv -``, ``--html -``) means the standard output; the summary then goes to stderr, so
the output can be piped. Errors print one line and exit with status 2 (malformed options, refused inputs, unwritable
outputs, running out of memory); an unexpected error prints one line too and exits with status 1 (``FL_TRACEBACK=1``
shows its traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, TextIO

from fl_core import __version__
from fl_core.compute import allocator
from fl_core.errors import FilterLensError, ModelSpecError
from fl_core.families import FAMILIES
from fl_core.io.paths import check_writable, file_to_write
from fl_core.io.preprocessing import InputConfig, Overrides
from fl_core.io.sources import ImageSource
from fl_core.settings import SettingField, add_settings_arguments, device_name, option_type, settings_fields

TOOLS: dict[str, tuple[str, str]] = {
    "app": ("fl_core.cli.app", "serve the dashboard, to this machine only unless --address (needs the app extra: "
                                "pip install 'filterlens[app]')"),
    "env": ("fl_core.cli.env", "print the versions of FilterLens, Python, torch, torchvision, timm and Dask and the "
                               "devices; check that torch and torchvision work together"),
}
"""Commands that are not an analysis family: name → (module, help)."""
CONSOLE_SCRIPT = "filterlens"
"""The installed command (pyproject's ``[project.scripts]``): the same commands as ``python -m fl_core``."""
STDOUT = Path("-")
"""The output path that means the standard output."""
FILE_OUTPUTS = ("json", "csv", "html")
"""The options that name an output file (any of them may be ``-``)."""


MAX_MESSAGE = 2000
"""The longest error line printed (a message quoting a user's value is cut there)."""


def commands() -> dict[str, tuple[str, str]]:
    """Every command: name → (module, help): each registered family's (:mod:`fl_core.families`), then :data:`TOOLS`."""
    return {**{name: (family.command, family.summary) for name, family in FAMILIES.items() if family.command},
            **TOOLS}


class CommandLine(argparse.ArgumentParser):
    """``argparse`` whose errors are one line, ``error: MESSAGE (see ... --help)``, with exit status 2."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument (\S+): \1 ", r"\1 ", message)  # "argument --k: --k must ..." says it twice
        self.exit(2, one_line(f"{message} (see {self.prog} --help)"))


def one_line(message: str) -> str:
    """``error: MESSAGE`` on one line (newlines folded, cut at :data:`MAX_MESSAGE` characters)."""
    text = " ".join(message.split())
    return f"error: {text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + '…'}\n"


def build_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per registered family with a command, and the tools. Command modules import
    only settings at their top (their analyses inside ``run``), so ``--help`` and a refused option never load torch."""
    prog = CONSOLE_SCRIPT if Path(sys.argv[0]).name == CONSOLE_SCRIPT else "python -m fl_core"
    parser = CommandLine(prog=prog, description="FilterLens analyses without a browser.")
    parser.add_argument("--version", action="version", version=f"FilterLens {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="ANALYSIS")
    for name, (module_name, help_text) in commands().items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=help_text, description=module.__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        if not standalone(module):
            add_output_arguments(sub)
        sub.set_defaults(run=module.run, standalone=standalone(module))
    return parser


def standalone(module: ModuleType) -> bool:
    """A command that writes no result (``STANDALONE = True``: the app); its ``run`` returns the exit status."""
    return bool(getattr(module, "STANDALONE", False))


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the result's to_dict() as JSON ('-': stdout)")
    parser.add_argument("--csv", type=Path, metavar="PATH", help="write the result's table as CSV ('-': stdout)")
    parser.add_argument("--device", type=option_device, default=None,
                        help="auto, cpu, cuda, cuda:N or mps (default: FL_DEVICE or automatic)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def option_device(text: str) -> str:
    """``--device``, its name checked before any analysis loads (:func:`fl_core.settings.device_name`)."""
    try:
        return device_name(text, "--device")
    except FilterLensError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def setting_field(cls: type, name: str) -> SettingField:
    """The field ``name`` of the settings class ``cls``."""
    return next(field for field in settings_fields(cls) if field.name == name)


def add_model_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--model SPEC`` (repeatable) and the preprocessing overrides for uploaded weights, each checked by
    :class:`~fl_core.io.preprocessing.InputConfig`'s own rules."""
    parser.add_argument("--model", action="append", required=required, metavar="SPEC", default=None,
                        help="timm:NAME[@pretrained|=PATH], torchvision:NAME[...], cifar:resnet56[=PATH], "
                             "weights:PATH, onnx:PATH (weights only) or demo:NAME")
    group = parser.add_argument_group("preprocessing overrides (registry models default to their own config)")
    add_settings_arguments(group, InputConfig, defaults=dict.fromkeys(InputConfig.__dataclass_fields__))


def add_selection_arguments(parser: argparse.ArgumentParser, settings: type) -> None:
    """``--layer`` / ``--stage`` (repeatable): which depthwise layers to use (a stage within ``settings``' bounds)."""
    parser.add_argument("--layer", action="append", default=None, metavar="NAME", help="depthwise layer (repeatable)")
    stage = dataclasses.replace(setting_field(settings, "stages"), flag="stage")
    parser.add_argument("--stage", action="append", type=option_type(stage), default=None, metavar="N",
                        help="stage index, 0 = highest resolution (repeatable)")


def add_image_arguments(parser: argparse.ArgumentParser) -> None:
    """``--images`` and ``--max-images`` (:class:`~fl_core.io.sources.ImageSource`)."""
    add_settings_arguments(parser, ImageSource)


def input_overrides(args: argparse.Namespace) -> Overrides:
    """The preprocessing overrides given on the command line (:meth:`InputConfig.overrides`)."""
    return InputConfig.overrides(vars(args))


def load_models(args: argparse.Namespace) -> list[Any]:
    """Load every ``--model`` with the preprocessing overrides."""
    from fl_core.io.models import load_model

    return [load_model(spec, input_overrides=dict(input_overrides(args))) for spec in args.model]


def single_model(args: argparse.Namespace) -> Any:
    """The one model of ``--model`` (these analyses take one)."""
    if len(args.model) != 1:
        raise ModelSpecError("This analysis takes one --model; run it once per model.")
    return load_models(args)[0]


def write_output(path: Path, text: str, stdout: TextIO) -> str:
    """Write ``text`` to ``path``, or to ``stdout`` when the path is ``-``; return where it went, for the summary."""
    if path == STDOUT:
        stdout.write(text)
        stdout.flush()
        return "the standard output"
    file_to_write(path).write_bytes(text.encode())
    return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    allocator.tune()  # large tensors from the heap (fl_core.compute.allocator)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.standalone:
        try:
            return int(args.run(args, None))
        except Exception as err:  # every error is one line; the traceback only on request
            return report_error(err)
    piped = [f"--{name}" for name in FILE_OUTPUTS if getattr(args, name, None) == STDOUT]
    if len(piped) > 1:
        parser.error(f"{' and '.join(piped)} both name '-': only one output can go to the standard output")
    for name in FILE_OUTPUTS:
        if (path := getattr(args, name, None)) is not None and path != STDOUT and path.is_dir():
            parser.error(f"--{name} {path} is a folder: give the path of a file to write")
    args.stdout = sys.stdout  # where '-' writes; while the analysis runs, its summary goes to stderr instead
    try:
        for name in FILE_OUTPUTS:  # before the analysis runs: an output it may not write is refused at once
            if (path := getattr(args, name, None)) is not None and path != STDOUT:
                check_writable(path)
        with contextlib.redirect_stdout(sys.stderr) if piped else contextlib.nullcontext():
            result = args.run(args, False if args.quiet else None)  # None: a bar where a person watches
        if args.json:
            write_output(args.json, json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n", args.stdout)
        if args.csv:
            write_output(args.csv, result.to_csv(), args.stdout)
    except Exception as err:  # every error is one line; the traceback only on request
        return report_error(err)
    return 0


def report_error(err: Exception) -> int:
    """Print ``err`` as one line on stderr and return the exit status: 2 for what the user can fix (a refused input,
    a file that cannot be written, running out of memory), 1 for anything else, whose traceback ``FL_TRACEBACK=1``
    shows."""
    from fl_core.compute.environment import explained_import_error

    if isinstance(err, FilterLensError):
        message, status = str(err), 2
    elif isinstance(err, ImportError | RuntimeError | OSError) and (explained := explained_import_error(err)):
        message, status = explained, 2
    elif isinstance(err, OSError):
        message, status = f"{err.strerror or err}: {err.filename or ''}. Check the path and its permissions.", 2
    elif isinstance(err, MemoryError):
        message, status = ("the analysis ran out of memory. Use fewer or smaller images, fewer seeds, or a smaller "
                           "model."), 2
    else:
        if os.environ.get("FL_TRACEBACK"):
            raise err
        message, status = (f"unexpected {type(err).__name__}: {err} (a bug in FilterLens: run again with "
                           "FL_TRACEBACK=1 for the traceback and report it)"), 1
    sys.stderr.write(one_line(message))
    return status
