"""The demo checkpoints shipped in ``fl_core/assets/demo`` (``demo:NAME``), as its manifest lists them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache

from fl_core.io import DEMO_DIR

DEMO_INPUT_SOURCE = "the demo's manifest (how it was trained)"


@dataclass(frozen=True)
class DemoEntry:
    """One checkpoint of ``fl_core/assets/demo/manifest.json``; without ``arch`` a weights-only file (a filter bank)."""

    name: str
    file: str
    arch: str | None = None
    arch_kwargs: dict = field(default_factory=dict)
    input_config: dict = field(default_factory=dict)
    class_names: tuple[str, ...] = ()
    description: str = ""
    init: str | None = None
    provenance: dict = field(default_factory=dict)

    @property
    def init_spec(self) -> str | None:
        """The untrained baseline's spec: another demo (``init`` is a demo name) or a registry random init
        (``init`` is a spec such as ``torchvision:squeezenet1_0``)."""
        if self.init is None:
            return None
        return self.init if ":" in self.init else f"demo:{self.init}"


@cache
def demo_manifest() -> dict[str, DemoEntry]:
    """Demo checkpoints shipped with the app, by name (``demo:NAME``)."""
    path = DEMO_DIR / "manifest.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    return {e["name"]: DemoEntry(**{**e, "class_names": tuple(e.get("class_names", ()))}) for e in raw["models"]}
