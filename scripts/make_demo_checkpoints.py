"""Build the demo checkpoints shipped in fl_core/assets/demo (run from the repository root).

    python scripts/make_demo_checkpoints.py [--steps 600] [--seed 0]

Trains a small VGG-like CNN (3×3 first layer, 32 filters) for a few CPU minutes on 32×32 crops of the bundled
photos (label = source photo, validation crops from a disjoint strip of each photo) and saves its initialization
and trained weights as safetensors, with their manifest entries recording how they were made (other entries of the
manifest are kept).
"""

from __future__ import annotations

import argparse
import json
import platform
from dataclasses import asdict
from pathlib import Path

import torch

from fl_core.io import DEMO_DIR
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.crops import CropSettings, photo_crops
from fl_core.io.nets import build_net
from fl_core.lab.train import TrainSettings, evaluate, train_classifier

ARCH = "small_vgg"
ARCH_KWARGS = {"widths": [32, 64, 128], "first_kernel": 3}
DEMO_LR, DEMO_MOMENTUM = 0.05, 0.9
"""SGD with momentum (not the Training Lab's plain SGD): how ``tiny_vgg`` was trained, in a few CPU minutes."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEMO_DIR)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    data = photo_crops(CropSettings(seed=args.seed))
    model = build_net(ARCH, num_classes=len(data.classes), **ARCH_KWARGS)
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    config = TrainSettings(steps=args.steps, seed=args.seed, lr=DEMO_LR, momentum=DEMO_MOMENTUM)
    init_loss, init_acc = evaluate(model, data.val_x, data.val_y, data.normalize, torch.device("cpu"))
    history = train_classifier(model, data.train_x, data.train_y, data.val_x, data.val_y, data.normalize,
                               model.features[0], config, device="cpu",
                               progress=lambda f, m: print(f"{f:6.1%} {m}", flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    save_state_dict(init_state, args.out / "tiny_vgg_init.safetensors")
    save_state_dict(model.state_dict(), args.out / "tiny_vgg.safetensors")
    common = {"arch": ARCH, "arch_kwargs": {**ARCH_KWARGS, "num_classes": len(data.classes)},
              "input_config": asdict(data.input_config()), "class_names": list(data.classes)}
    how = {"script": "scripts/make_demo_checkpoints.py", "seed": args.seed, "data": asdict(data.config),
           "train_crops": len(data.train_x), "val_crops": len(data.val_x), "torch": torch.__version__,
           "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads"}
    built = [
        {"name": "tiny_vgg", "file": "tiny_vgg.safetensors", "init": "tiny_vgg_init", **common,
         "description": "Small VGG-like CNN trained for a few CPU minutes on 32×32 crops of the bundled photos "
                        "(11 classes: which photo a crop comes from).",
         "provenance": {**how, "trained_steps": args.steps, "training_seconds": round(history.seconds, 1),
                        "optimizer": asdict(config), "val_accuracy": round(history.final_val_accuracy, 4),
                        "val_loss": round(history.val_loss[-1], 4)}},
        {"name": "tiny_vgg_init", "file": "tiny_vgg_init.safetensors", "init": None, **common,
         "description": "The same network at its random initialization (before training): the baseline.",
         "provenance": {**how, "trained_steps": 0, "training_seconds": 0.0, "val_accuracy": round(init_acc, 4),
                        "val_loss": round(init_loss, 4)}},
    ]
    path = args.out / "manifest.json"
    kept = [e for e in json.loads(path.read_text())["models"] if e["name"] not in {b["name"] for b in built}] \
        if path.is_file() else []  # entries of other scripts (demo:lab_*, the depthwise bank) stay
    path.write_text(json.dumps({"models": [*built, *kept]}, indent=2) + "\n")
    print(f"saved to {args.out}: validation accuracy {history.final_val_accuracy:.1%} after {args.steps} steps "
          f"({history.seconds:.0f} s); chance {1 / len(data.classes):.1%}")


if __name__ == "__main__":
    main()
