"""The bundled photos are package data: byte-for-byte copies of the packages' sample files, decoded to exactly the
pixels of the packages' own loaders (so every number computed on them is unchanged), opened without those
packages."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from fl_core.io.images import BUNDLED_PHOTOS, PHOTOS_DIR, _bundled_array, bundled_images
from tests.script_modules import REPO, script_module

LIBRARIES = ("skimage", "sklearn", "matplotlib")
OPEN_LICENCE = re.compile(r"^(public domain\b|\[?CC0\b|\[?CC BY \d\.\d\b)")
"""What a lab may redistribute with a credit: public domain, CC0 or CC BY (not -NC, -ND or -SA, not "no known
restrictions")."""


def attribution_photo_rows() -> dict[str, str]:
    """The licence column of ATTRIBUTION.md's photo table, by file name."""
    text = (REPO / "fl_core" / "assets" / "ATTRIBUTION.md").read_text(encoding="utf-8")
    table = text[text.index("## `photos/`"):]
    return {cells[0].strip("` "): cells[-1].strip() for line in table.splitlines() if line.startswith("| `")
            for cells in [line.strip("|").split(" | ")]}


def test_every_photo_is_shipped_and_attributed() -> None:
    attribution = (REPO / "fl_core" / "assets" / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in PHOTOS_DIR.iterdir()) == sorted(photo.path.name for photo in BUNDLED_PHOTOS)
    for photo in BUNDLED_PHOTOS:
        assert f"`{photo.path.name}`" in attribution, photo.name
    assert len(bundled_images()) == 11


def test_every_photo_is_public_domain_cc0_or_cc_by() -> None:
    rows = attribution_photo_rows()
    assert sorted(rows) == sorted(photo.path.name for photo in BUNDLED_PHOTOS)
    for name, licence in rows.items():
        assert OPEN_LICENCE.match(licence), f"{name}: {licence}"
    for photo in BUNDLED_PHOTOS:
        assert OPEN_LICENCE.match(photo.licence), photo


def test_the_copies_are_the_packages_files_and_decode_to_their_loaders_pixels() -> None:
    for library in LIBRARIES:
        pytest.importorskip(library)
    with script_module("scripts/make_bundled_photos.py") as script:
        for photo in BUNDLED_PHOTOS:
            assert photo.path.read_bytes() == script.package_file(photo).read_bytes(), photo.name
            assert np.array_equal(_bundled_array(photo.name), script.library_pixels(photo)), photo.name


@pytest.mark.slow
def test_opening_the_photos_imports_no_plotting_or_ml_library() -> None:
    code = ("import sys\n"
            "from fl_core.io.images import bundled_images\n"
            "photos = bundled_images()\n"
            "print(sum(photos.image(i).size[0] for i in range(len(photos))))\n"
            f"print(sorted(m for m in {LIBRARIES!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=300).stdout.splitlines()
    assert int(out[0]) > 0 and out[1] == "[]"
