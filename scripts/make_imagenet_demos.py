"""Ship the two permissively licensed ImageNet classifiers as demos (run from the repository root).

    python scripts/make_imagenet_demos.py [--checkpoints ../shared/fixtures/checkpoints] [--out fl_core/assets/demo]

The two files are real ImageNet-1k classifiers in torchvision layout, converted by their providers from public
releases (their READMEs, next to the files, give the full provenance):

- ``squeezenet1_0_imagenet.pt``: SqueezeNet 1.0 from songhan/SqueezeNet-Deep-Compression (BSD licence); the Caffe
  preprocessing is folded into the first convolution, so the model takes torchvision's standard input.
- ``mobilenet_v2_imagenet.pt``: MobileNetV2 1.0 (224) from google-coral/test_data (Apache-2.0); it expects inputs in
  [-1, 1] (mean = std = 0.5), not torchvision's ImageNet statistics.

The script reads each file with the app's own bounded loader (``torch.load(weights_only=True)``), checks that it
loads strictly into the torchvision architecture, writes the tensors unchanged (float32) as safetensors and adds (or
replaces) the entry of each in ``manifest.json`` with its architecture, evaluation preprocessing, licence and
SHA-256s, leaving the other entries alone. Their random initializations are not shipped: the manifest names the
registry's random init (``torchvision:NAME``, seed 0) as the untrained baseline of the same architecture.
``fl_core/assets/ATTRIBUTION.md`` records sources and licences.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fl_core.io import DEMO_DIR
from fl_core.io.checkpoints import file_sha256, load_state_dict, match_state_dict, save_state_dict

IMAGENET_DEMOS = {
    "squeezenet1_0": {
        "file": "squeezenet1_0_imagenet.pt",
        "arch": "torchvision:squeezenet1_0",
        "input_config": {"input_size": 224, "crop_pct": 0.875, "interpolation": "bilinear",
                         "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
        "description": "SqueezeNet 1.0 trained on ImageNet-1k (Iandola, Han et al. 2016; Deep Compression weights, "
                       "BSD): 96 first-layer filters of 7×7, a real ImageNet first layer.",
        "licence": "BSD (songhan/SqueezeNet-Deep-Compression LICENSE)",
        "upstream": "github.com/songhan/SqueezeNet-Deep-Compression @ fb13faa2cf121ced9999f8a9d538ec6c56084733",
    },
    "mobilenet_v2": {
        "file": "mobilenet_v2_imagenet.pt",
        "arch": "torchvision:mobilenet_v2",
        "input_config": {"input_size": 224, "crop_pct": 0.875, "interpolation": "bilinear",
                         "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
        "description": "MobileNetV2 1.0 (224) trained on ImageNet-1k (Google, quantization-aware training, "
                       "Apache-2.0), dequantized into torchvision layout: 17 real 3×3 depthwise layers.",
        "licence": "Apache-2.0 (google-coral/test_data)",
        "upstream": "github.com/google-coral/test_data mobilenet_v2_1.0_224_quant.tflite",
    },
}
"""Name → what the manifest records (the source file under ``--checkpoints``, architecture, preprocessing)."""


def ship(name: str, source: Path, out: Path) -> dict:
    """Write ``out/<name>.safetensors`` from ``source`` (checked against the architecture); its manifest entry."""
    from fl_core.io.registries import registry_model

    demo = IMAGENET_DEMOS[name]
    tensors = load_state_dict(source).tensors
    model, _ = registry_model(demo["arch"])
    match = match_state_dict(model, tensors)
    if match.missing or match.unexpected or match.shape_conflicts:
        raise SystemExit(f"{source} does not load strictly into {demo['arch']}: {match}")
    target = out / f"{name}.safetensors"
    save_state_dict({k: v.float().contiguous() for k, v in tensors.items()}, target)
    target.chmod(0o644)
    return {"name": name, "file": target.name, "arch": demo["arch"], "init": demo["arch"],
            "input_config": demo["input_config"], "description": demo["description"],
            "provenance": {"script": "scripts/make_imagenet_demos.py", "source_file": source.name,
                           "source_sha256": file_sha256(source), "asset_sha256": file_sha256(target),
                           "licence": demo["licence"], "upstream": demo["upstream"], "dataset": "ImageNet-1k",
                           "init_note": "the registry's random init of the same architecture (seed 0), not this "
                                        "network's own initialization, which was not published"}}


def register(entries: list[dict], manifest: Path) -> None:
    """Add or replace ``entries`` in the manifest (by name), other entries unchanged."""
    raw = json.loads(manifest.read_text())
    names = {e["name"] for e in entries}
    raw["models"] = [e for e in raw["models"] if e["name"] not in names] + entries
    manifest.write_text(json.dumps(raw, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=Path, default=Path("../shared/fixtures/checkpoints"))
    parser.add_argument("--out", type=Path, default=DEMO_DIR)
    args = parser.parse_args()
    entries = [ship(name, args.checkpoints / demo["file"], args.out) for name, demo in IMAGENET_DEMOS.items()]
    register(entries, args.out / "manifest.json")
    for entry in entries:
        print(f"{entry['name']}: {entry['file']} sha256 {entry['provenance']['asset_sha256']}")


if __name__ == "__main__":
    main()
