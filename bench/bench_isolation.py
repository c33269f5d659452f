"""What isolating a hooked analysis from the shared cached model costs: :meth:`LoadedModel.forward_copy` (new module
objects sharing the weight tensors) against one forward pass of a 224×224 image, per architecture.

    python bench/bench_isolation.py [--spec SPEC ...] [--repeats 5]

The copy is made once per analysis run, the forward passes it serves are many (every image batch), so the ratio says
what a private copy adds to the cheapest possible analysis (one image). Models are registry architectures at random
init (no download). Also checks that the copy shares the weights (no extra parameter memory) and that a hook on it
leaves the shared model without hooks.
"""

from __future__ import annotations

import argparse

import torch
from _scaling import best_time

from fl_core.io.models import load_model

SPECS = ("demo:tiny_vgg", "timm:resnet50", "timm:convnext_tiny", "timm:efficientnet_b0", "timm:mobilenetv3_large_100",
         "timm:vit_small_patch16_224")


def _hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def measure(spec: str, repeats: int) -> dict[str, object]:
    """Copy time, forward time (batch of one), their ratio, and the isolation checks for one model."""
    loaded = load_model(spec)
    device = torch.device("cpu")
    size = loaded.input_config.input_size
    image = torch.randn(1, 3, size, size)
    copy_s, private = best_time(lambda: loaded.forward_copy(device), repeats)
    with torch.inference_mode():
        forward_s, _ = best_time(lambda: loaded.model(image), repeats)
    shared = {t.data_ptr() for t in loaded.model.parameters()}
    next(private.children()).register_forward_hook(lambda *_: None)
    return {"spec": spec, "modules": sum(1 for _ in loaded.model.modules()), "copy_ms": 1000 * copy_s,
            "forward_ms": 1000 * forward_s, "ratio": copy_s / forward_s,
            "shares_weights": all(t.data_ptr() in shared for t in private.parameters()),
            "shared_hooks": _hooks(loaded.model)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", action="append", help=f"model spec (repeatable; default: {', '.join(SPECS)})")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"{'model':32} {'modules':>7} {'copy ms':>8} {'forward ms':>10} {'copy/fwd':>8}  shares weights  "
          "hooks on shared")
    for spec in args.spec or SPECS:
        row = measure(spec, args.repeats)
        print(f"{row['spec']:32} {row['modules']:7d} {row['copy_ms']:8.2f} {row['forward_ms']:10.1f} "
              f"{row['ratio']:8.3f}  {row['shares_weights']!s:14}  {row['shared_hooks']}")


if __name__ == "__main__":
    main()
