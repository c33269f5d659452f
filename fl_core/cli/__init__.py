"""Command line: ``python -m fl_core <analysis> --model SPEC [--model SPEC ...] [options] [--json PATH] [--csv PATH]``.

Each analysis is a module of this package with ``add_arguments(parser)`` and ``run(args, progress) -> Result``;
:data:`COMMANDS` lists them (configs as data). The result's ``to_dict()`` goes to ``--json``, its ``to_frame()`` to
``--csv``, and a short summary to stdout. ``-`` as an output path (``--json -``, ``--csv -``, ``--html -``) means the
standard output; the summary then goes to stderr, so the output can be piped. Errors print one line and exit with
status 2 (malformed options, refused inputs, unwritable outputs, running out of memory); an unexpected error prints
one line too and exits with status 1 (``FL_TRACEBACK=1`` shows its traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from fl_core import __version__, allocator
from fl_core.errors import FilterLensError, ModelSpecError
from fl_core.io.images import BUNDLED
from fl_core.io.models import load_model
from fl_core.io.preprocessing import CROP_MODES, INTERPOLATIONS, MAX_RESIZE_SIZE, InputConfig, Overrides
from fl_core.settings import MAX_IMAGES, bounded

COMMANDS: dict[str, str] = {
    "inspect": "list a model's convolutions, input preprocessing and load notes",
    "energy": "first-layer (or any layer's) energy profiles, linear-theory fit, random-init baseline",
    "whitening": "spatial autocorrelation C(δ)/C(0) of RGB, learned, random-init and ZCA filter responses",
    "train": "train a small CNN on labelled crops: first-layer snapshots, profile trajectory vs theory, paper claims",
    "masterkeys": "cluster depthwise filters (sign/scale invariant) and assign them to the 8 master key filters",
    "scalespace": "σ of the idealized scale-space models of the 8 master keys by fitting method A-D",
    "rescore": "swap depthwise filters for idealized models and re-score top-1/top-5 (torchrun for several GPUs)",
    "channels": "two axes per channel (local replaceability vs task relevance), lesions, peer replacement, pruning",
    "report": "one self-contained offline HTML report of a checkpoint or of a run's checkpoints (--html PATH)",
    "survey": "one analysis over many models (patterns, lists, folders), a row per model, on a Dask cluster's workers",
}

CONSOLE_SCRIPT = "filterlens"
"""The installed command (pyproject's ``[project.scripts]``): the same commands as ``python -m fl_core``."""
STDOUT = Path("-")
"""The output path that means the standard output."""
FILE_OUTPUTS = ("json", "csv", "html")
"""The options that name an output file (any of them may be ``-``)."""


MAX_MESSAGE = 2000
"""The longest error line printed (a message quoting a user's value is cut there)."""


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
    prog = CONSOLE_SCRIPT if Path(sys.argv[0]).name == CONSOLE_SCRIPT else "python -m fl_core"
    parser = CommandLine(prog=prog, description="FilterLens analyses without a browser.")
    parser.add_argument("--version", action="version", version=f"FilterLens {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="ANALYSIS")
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"fl_core.cli.{name}")
        sub = subparsers.add_parser(name, help=help_text, description=module.__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        add_output_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the result's to_dict() as JSON ('-': stdout)")
    parser.add_argument("--csv", type=Path, metavar="PATH", help="write the result's table as CSV ('-': stdout)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: FL_DEVICE or automatic)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_model_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--model SPEC`` (repeatable) and the preprocessing overrides for uploaded weights."""
    parser.add_argument("--model", action="append", required=required, metavar="SPEC", default=None,
                        help="timm:NAME[@pretrained|=PATH], torchvision:NAME[...], cifar:resnet56[=PATH], "
                             "weights:PATH, onnx:PATH (weights only) or demo:NAME")
    group = parser.add_argument_group("preprocessing overrides (registry models default to their own config)")
    group.add_argument("--input-size", type=bounded(int, 8, MAX_RESIZE_SIZE, "input-size"),
                       help="square input size in pixels")
    group.add_argument("--crop-pct", type=bounded(float, 0.05, 1.0, "crop-pct"),
                       help="crop fraction: resize to size/crop_pct (the edge --crop-mode names), then crop size")
    group.add_argument("--interpolation", choices=INTERPOLATIONS)
    group.add_argument("--crop-mode", choices=CROP_MODES,
                       help="timm's crop modes: resize the short side (center), both sides (squash) or the long side "
                            "with mean-colour padding (border) to size/crop_pct, then centre-crop")
    group.add_argument("--mean", type=float, nargs=3, metavar=("R", "G", "B"))
    group.add_argument("--std", type=float, nargs=3, metavar=("R", "G", "B"))


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """``--layer`` / ``--stage`` (repeatable): which depthwise layers to use."""
    parser.add_argument("--layer", action="append", default=None, metavar="NAME", help="depthwise layer (repeatable)")
    parser.add_argument("--stage", action="append", type=bounded(int, 0, 64, "stage"), default=None, metavar="N",
                        help="stage index, 0 = highest resolution (repeatable)")


def add_image_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", default=BUNDLED, metavar="SOURCE",
                        help="'bundled' (offline natural photos), a folder, or an ImageFolder tree")
    parser.add_argument("--max-images", type=bounded(int, 1, MAX_IMAGES, "max-images"), default=None,
                        help="use at most this many images")


def input_overrides(args: argparse.Namespace) -> Overrides:
    """The preprocessing overrides given on the command line (:meth:`InputConfig.overrides`)."""
    return InputConfig.overrides(vars(args))


def load_models(args: argparse.Namespace) -> list:
    """Load every ``--model`` with the preprocessing overrides."""
    return [load_model(spec, input_overrides=dict(input_overrides(args))) for spec in args.model]


def single_model(args: argparse.Namespace):
    """The one model of ``--model`` (these analyses take one)."""
    if len(args.model) != 1:
        raise ModelSpecError("This analysis takes one --model; run it once per model.")
    return load_models(args)[0]


def tqdm_progress(quiet: bool):
    """A ``progress(fraction, message)`` callback drawing a tqdm bar on stderr (``None`` when quiet)."""
    if quiet:
        return None
    from tqdm import tqdm

    bars: list[tqdm] = []

    def progress(fraction: float, message: str) -> None:
        if not bars:
            bars.append(tqdm(total=1000, file=sys.stderr, leave=False,
                             bar_format="{l_bar}{bar}| {elapsed}<{remaining}"))
        bar = bars[0]
        bar.n = int(fraction * 1000)
        bar.set_description(message[:60])
        bar.refresh()

    return progress


def write_output(path: Path, text: str, stdout: TextIO) -> str:
    """Write ``text`` to ``path``, or to ``stdout`` when the path is ``-``; return where it went, for the summary."""
    if path == STDOUT:
        stdout.write(text)
        stdout.flush()
        return "the standard output"
    path.write_text(text, encoding="utf-8")
    return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    allocator.tune()  # large tensors from the heap (fl_core.allocator)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    piped = [f"--{name}" for name in FILE_OUTPUTS if getattr(args, name, None) == STDOUT]
    if len(piped) > 1:
        parser.error(f"{' and '.join(piped)} both name '-': only one output can go to the standard output")
    for name in FILE_OUTPUTS:
        if (path := getattr(args, name, None)) is not None and path != STDOUT and path.is_dir():
            parser.error(f"--{name} {path} is a folder: give the path of a file to write")
    args.stdout = sys.stdout  # where '-' writes; while the analysis runs, its summary goes to stderr instead
    try:
        with contextlib.redirect_stdout(sys.stderr) if piped else contextlib.nullcontext():
            result = args.run(args, tqdm_progress(args.quiet))
        if args.json:
            write_output(args.json, json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n", args.stdout)
        if args.csv:
            write_output(args.csv, result.to_frame().to_csv(index=False), args.stdout)
    except Exception as err:  # every error is one line; the traceback only on request
        return report_error(err)
    return 0


def report_error(err: Exception) -> int:
    """Print ``err`` as one line on stderr and return the exit status: 2 for what the user can fix (a refused input,
    a file that cannot be written, running out of memory), 1 for anything else, whose traceback ``FL_TRACEBACK=1``
    shows."""
    if isinstance(err, FilterLensError):
        message, status = str(err), 2
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
