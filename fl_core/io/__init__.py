"""Input and output: model specs, safe checkpoint and ONNX loading, images and crop data sets, layers, small nets.

The shipped files (demo checkpoints, Training Lab runs, the published master-key filters) are package data under
``fl_core/assets``, found through :mod:`importlib.resources`, so an installed wheel has them too.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

ASSETS_DIR = Path(str(files("fl_core") / "assets"))
"""The package's data folder: ``demo/`` (checkpoints + manifest), ``runs/`` (shipped Training Lab runs),
``master_key_8filters.txt`` (see ``ATTRIBUTION.md`` there)."""
DEMO_DIR = ASSETS_DIR / "demo"
