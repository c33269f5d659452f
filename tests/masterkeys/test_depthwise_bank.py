"""The shipped real depthwise bank (``demo:ppocrv6_det_small_dw7``): what it holds, where it comes from, and that
scripts/make_depthwise_bank.py reproduces it (with ``FL_RAPIDOCR_WHEEL`` set to the rapidocr 3.10.0 wheel)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_core.io import ASSETS_DIR, DEMO_DIR
from fl_core.io.checkpoints import file_sha256, load_state_dict
from fl_core.io.demos import demo_manifest
from fl_core.io.models import load_model
from fl_core.masterkeys.assignment import assign_to_master_keys
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.scalespace import load_published_filters

from ..script_modules import script_module

NAME = "ppocrv6_det_small_dw7"


SCRIPT = "scripts/make_depthwise_bank.py"


def test_shipped_bank_is_384_trained_7x7_depthwise_filters_with_its_recorded_hash() -> None:
    entry = demo_manifest()[NAME]
    path = DEMO_DIR / entry.file
    assert file_sha256(path) == entry.provenance["asset_sha256"]
    tensors = load_state_dict(path).tensors
    assert sorted(tensors) == sorted(entry.provenance["layers"])
    assert all(tuple(t.shape) == (96, 1, 7, 7) for t in tensors.values())
    loaded = load_model(f"demo:{NAME}")
    assert loaded.weights_only and not loaded.random_init
    bank = depthwise_bank(loaded)
    assert bank.kernel_sizes == {7: 384} == {7: entry.provenance["n_filters"]} and not bank.skipped


def test_real_bank_is_much_closer_to_the_published_keys_than_random_filters() -> None:
    bank = depthwise_bank(load_model(f"demo:{NAME}"))
    layers = bank.select(7)
    filters, index = bank.filters(layers)
    real = assign_to_master_keys(filters, index, layers)
    noise = torch.randn(filters.shape, generator=torch.Generator().manual_seed(0))
    random = assign_to_master_keys(noise, index, layers)
    assert real.counts.sum() == random.counts.sum() == 384
    assert real.median_abs_cosine > random.median_abs_cosine + 0.2
    # independently: centred unit filters against the centred unit published keys, best |cos| per filter
    flat = filters.double().reshape(len(filters), -1).numpy()
    keys = load_published_filters().reshape(8, -1).astype(float)
    units = [(m - m.mean(axis=1, keepdims=True)) / np.linalg.norm(m - m.mean(axis=1, keepdims=True), axis=1,
                                                                  keepdims=True) for m in (flat, keys)]
    best = np.abs(units[0] @ units[1].T)
    assert real.median_abs_cosine == pytest.approx(float(np.median(best.max(axis=1))))
    assert real.counts.tolist() == np.bincount(best.argmax(axis=1), minlength=8).tolist()


def test_attribution_records_the_source_and_licence() -> None:
    entry = demo_manifest()[NAME]
    text = (ASSETS_DIR / "ATTRIBUTION.md").read_text()
    for recorded in ("package", "version", "file", "file_sha256", "wheel_sha256", "licence"):
        assert str(entry.provenance[recorded]) in text
    with script_module(SCRIPT) as script:
        for shipped in script.LICENCE_FILES.values():
            assert "Apache License" in (DEMO_DIR / shipped).read_text()
        licences = (DEMO_DIR / script.LICENCE_FILES["MODEL_LICENSES.md"]).read_text()
        assert script.recorded_sha256(licences, Path(script.DETECTOR).name) == entry.provenance["file_sha256"]


def test_script_reproduces_the_shipped_bank(tmp_path: Path) -> None:
    wheel = os.environ.get("FL_RAPIDOCR_WHEEL")
    if not wheel or not Path(wheel).is_file():
        pytest.skip("set FL_RAPIDOCR_WHEEL to rapidocr-3.10.0-py3-none-any.whl (pip download --no-deps "
                    "rapidocr==3.10.0) to rebuild the bank")
    with script_module(SCRIPT) as script:
        entry = script.write_bank(Path(wheel), tmp_path)
    shipped = demo_manifest()[NAME].provenance
    assert entry["provenance"] == shipped
    assert file_sha256(tmp_path / f"{NAME}.safetensors") == shipped["asset_sha256"]
