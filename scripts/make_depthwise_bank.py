"""Build the real, trained 7×7 depthwise demo bank shipped in fl_core/assets/demo (run from the repository root).

    python scripts/make_depthwise_bank.py [--wheel rapidocr-3.10.0-py3-none-any.whl] [--out fl_core/assets/demo]

The filters are the 7×7 depthwise convolutions of PaddleOCR's PP-OCRv6 small text detector, as converted to ONNX and
shipped (Apache-2.0) in the PyPI package ``rapidocr``. Without ``--wheel`` the pinned wheel is fetched with
``pip download`` (a package, from the package index; nothing is downloaded at run time of the app). The script

1. checks the wheel's version and the detector's SHA-256 against the wheel's own MODEL_LICENSES.md record;
2. reads the detector with :func:`fl_core.io.onnx_weights.read_onnx_convs` (groups from the Conv nodes) and keeps the
   depthwise layers with 7×7 kernels, in forward order;
3. writes them, unchanged, as ``ppocrv6_det_small_dw7.safetensors`` (the same bytes on every run), the wheel's
   LICENSE and MODEL_LICENSES.md next to it, and adds (or replaces) the ``ppocrv6_det_small_dw7`` entry of
   fl_core/assets/demo/manifest.json, whose provenance records package, version, file and SHA-256s, without touching the
   other entries.

fl_core/assets/ATTRIBUTION.md records the same source and licence; tests/masterkeys/test_depthwise_bank.py checks the
shipped file against the manifest and, with ``FL_RAPIDOCR_WHEEL`` set to the wheel, that this script reproduces it
byte for byte.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from fl_core.io import DEMO_DIR
from fl_core.io.checkpoints import file_sha256, save_state_dict
from fl_core.io.onnx_weights import read_onnx_convs

PACKAGE = "rapidocr"
VERSION = "3.10.0"
DETECTOR = "rapidocr/models/PP-OCRv6_det_small.onnx"
LICENCE_FILES = {"LICENSE": "rapidocr_LICENSE.txt", "MODEL_LICENSES.md": "rapidocr_MODEL_LICENSES.md"}
NAME = "ppocrv6_det_small_dw7"
KERNEL = (7, 7)


def fetch_wheel(folder: Path) -> Path:
    """``pip download --no-deps rapidocr==VERSION`` into ``folder``; the wheel's path."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                    f"{PACKAGE}=={VERSION}", "-d", str(folder)], check=True)
    return next(folder.glob(f"{PACKAGE}-{VERSION}-*.whl"))


def recorded_sha256(model_licenses: str, file_name: str) -> str:
    """The SHA-256 that the wheel's MODEL_LICENSES.md table records for ``file_name``."""
    match = re.search(rf"`{re.escape(file_name)}`.*?`([0-9a-f]{{64}})`", model_licenses)
    if match is None:
        raise SystemExit(f"MODEL_LICENSES.md records no SHA-256 for {file_name}")
    return match.group(1)


def extract(wheel: Path, folder: Path) -> tuple[Path, dict[str, str]]:
    """The detector and the licence files unpacked into ``folder``, after the version and SHA-256 checks."""
    with zipfile.ZipFile(wheel) as archive:
        info = f"{PACKAGE}-{VERSION}.dist-info"
        names = set(archive.namelist())
        if f"{info}/METADATA" not in names:
            raise SystemExit(f"{wheel.name} is not {PACKAGE} {VERSION}")
        licences = {name: archive.read(f"{info}/licenses/{name}").decode() for name in LICENCE_FILES}
        detector = Path(archive.extract(DETECTOR, folder))
    expected = recorded_sha256(licences["MODEL_LICENSES.md"], Path(DETECTOR).name)
    if file_sha256(detector) != expected:
        raise SystemExit(f"{DETECTOR}: SHA-256 {file_sha256(detector)} differs from the recorded {expected}")
    return detector, licences


def depthwise_7x7(detector: Path) -> dict:
    """``{NAME.weight: (96, 1, 7, 7)}`` of the detector's 7×7 depthwise layers (declared groups), forward order."""
    convs = read_onnx_convs(detector)
    return {layer.weight_key: convs.tensors[layer.weight_key] for layer in convs.layers
            if layer.kind == "depthwise" and layer.kernel_size == KERNEL}


def write_bank(wheel: Path, out: Path) -> dict:
    """Write the bank, the licence files and the manifest entry into ``out``; the entry."""
    with tempfile.TemporaryDirectory() as tmp:
        detector, licences = extract(wheel, Path(tmp))
        tensors = depthwise_7x7(detector)
        detector_sha = file_sha256(detector)
    source = {"package": PACKAGE, "version": VERSION, "wheel": wheel.name, "wheel_sha256": file_sha256(wheel),
              "file": DETECTOR, "file_sha256": detector_sha, "licence": "Apache-2.0",
              "upstream": "PaddleOCR PP-OCRv6_small_det (copyright Baidu and/or the PaddleOCR rights holders)"}
    out.mkdir(parents=True, exist_ok=True)
    bank = out / f"{NAME}.safetensors"
    save_state_dict(tensors, bank)  # no metadata: safetensors writes it in hash order, and the bytes must repeat
    bank.chmod(0o644)  # readable by the server's user, like the other assets
    for name, target in LICENCE_FILES.items():
        (out / target).write_text(licences[name])
    n_filters = sum(int(t.shape[0]) for t in tensors.values())
    entry = {"name": NAME, "file": bank.name, "arch": None, "init": None,
             "description": f"Real trained filters, weights only: the {n_filters} 7×7 depthwise filters "
                            f"({len(tensors)} layers) of PP-OCRv6 det small, PaddleOCR's text detector (trained on "
                            "text images, not an ImageNet classifier), from the rapidocr wheel (Apache-2.0).",
             "provenance": {"script": "scripts/make_depthwise_bank.py", **source, "layers": list(tensors),
                            "n_filters": n_filters, "asset_sha256": file_sha256(bank)}}
    manifest = out / "manifest.json"
    document = json.loads(manifest.read_text()) if manifest.is_file() else {"models": []}
    others = [e for e in document["models"] if e["name"] != NAME]
    document["models"] = [*others, entry]
    manifest.write_text(json.dumps(document, indent=2) + "\n")
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, default=None, help=f"the {PACKAGE} {VERSION} wheel (default: pip "
                                                                 "download it)")
    parser.add_argument("--out", type=Path, default=DEMO_DIR)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or fetch_wheel(Path(tmp))
        entry = write_bank(wheel, args.out)
    print(json.dumps(entry["provenance"], indent=2))


if __name__ == "__main__":
    main()
