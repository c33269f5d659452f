"""Copy the bundled photos into fl_core/assets/photos (run from the repository root, with scikit-image, scikit-learn
and matplotlib installed: ``pip install -r requirements-dev.txt``).

    python scripts/make_bundled_photos.py [--out fl_core/assets/photos]

Each photo of :data:`fl_core.io.images.BUNDLED_PHOTOS` is the file its package ships as sample data, copied byte for
byte (``BundledPhoto.source``), so no decoder runs here. The script then checks that FilterLens decodes every copy to
exactly the pixels of the package's own loader (``skimage.data``, ``sklearn.datasets.load_sample_image``,
``matplotlib.cbook.get_sample_data``), which is what the analyses saw when they read the photos through those
packages, and prints each file's SHA-256. Credits and licences: fl_core/assets/ATTRIBUTION.md;
tests/io/test_bundled_photos.py repeats the comparison wherever the three packages are installed.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
from importlib.resources import files
from pathlib import Path

import numpy as np
from PIL import Image

from fl_core.io.images import BUNDLED_PHOTOS, PHOTOS_DIR, BundledPhoto

SKIMAGE_LOADERS = {"astronaut": "astronaut", "coffee": "coffee", "chelsea": "chelsea", "rocket": "rocket",
                   "hubble_deep_field": "hubble_deep_field", "brick": "brick", "retina": "retina", "camera": "camera"}
"""The ``skimage.data`` function of each scikit-image photo (each reads a file the package ships: none downloads)."""


def package_file(photo: BundledPhoto) -> Path:
    """The original in the installed package (``source`` = top-level module / path inside it)."""
    module, _, inside = photo.source.partition("/")
    return Path(str(files(module) / inside))


def library_pixels(photo: BundledPhoto) -> np.ndarray:
    """The photo as its package's own loader returns it, as uint8 RGB."""
    if photo.package == "scikit-image":
        import skimage.data

        image = getattr(skimage.data, SKIMAGE_LOADERS[photo.name])()
    elif photo.package == "scikit-learn":
        from sklearn.datasets import load_sample_image

        image = load_sample_image(Path(photo.source).name)
    else:
        import matplotlib.cbook

        with matplotlib.cbook.get_sample_data(Path(photo.source).name) as handle:
            image = np.asarray(Image.open(handle).convert("RGB"))
    image = np.asarray(image, dtype=np.uint8)
    return np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image  # grey photos (brick, camera) as RGB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=PHOTOS_DIR, help="folder of the copies")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for photo in BUNDLED_PHOTOS:
        copy = out / photo.path.name
        shutil.copyfile(package_file(photo), copy)
        with Image.open(copy) as image:
            pixels = np.asarray(image.convert("RGB"))
        if not np.array_equal(pixels, library_pixels(photo)):
            raise SystemExit(f"{photo.name}: the copy decodes to other pixels than {photo.package}'s loader")
        print(f"{photo.name:22s} {copy.name:24s} {hashlib.sha256(copy.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()
