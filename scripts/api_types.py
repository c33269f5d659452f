"""Write the type checker's view of the public API: the ``TYPE_CHECKING`` block of ``fl_core/__init__.py``, one
``from MODULE import NAME as NAME`` per name of ``fl_core.PUBLIC_API`` (the registered families' names and
``CORE_API``), so that ``mypy``, pyright and editors see each family's own signatures (``analyze_x(..., k="8")`` is
an error) instead of the ``Any`` of the lazy module ``__getattr__``. Run from the repository root after registering
a family (docs/DEVELOPING.md, "Adding an analysis family"):

    python scripts/api_types.py            write the block
    python scripts/api_types.py --check    exit 1 when the block is not the registry's (what tests/test_api.py checks)

A type checker reads source, not the registry: ``register_family(Family(...))`` names its entry point as a
``"module:name"`` string and binds no name, which no type checker follows, so the block is written from the registry
by this script, and a test fails (naming this command) until it is.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INIT = REPO / "fl_core" / "__init__.py"
HEADER = ("if TYPE_CHECKING:  # the registry's names as type checkers see them: written by scripts/api_types.py, "
          "do not edit\n")
BLOCK = re.compile(r"^if TYPE_CHECKING:.*\n(?:    .*\n)+", re.MULTILINE)


def type_checking_block(public_api: Mapping[str, tuple[str, ...]]) -> str:
    """The block for ``public_api`` (module → names): one re-export per name, sorted by module and name."""
    pairs = sorted((module, name) for module, names in public_api.items() for name in names)
    return HEADER + "".join(f"    from {module} import {name} as {name}\n" for module, name in pairs)


def with_block(source: str, block: str) -> str:
    """``source`` (``fl_core/__init__.py``) with its ``TYPE_CHECKING`` block replaced by ``block``."""
    if not BLOCK.search(source):
        raise ValueError("fl_core/__init__.py has no 'if TYPE_CHECKING:' block to write")
    return BLOCK.sub(lambda _: block, source, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the block is up to date")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import fl_core

    source = INIT.read_text(encoding="utf-8")
    written = with_block(source, type_checking_block(fl_core.PUBLIC_API))
    if args.check:
        if written != source:
            print("fl_core/__init__.py's TYPE_CHECKING block is not the registry's: run python scripts/api_types.py")
            return 1
        return 0
    if written != source:
        INIT.write_text(written, encoding="utf-8")
        print(f"wrote the TYPE_CHECKING block of {INIT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
