"""The user's selection (models, preprocessing overrides, images, device) and its mirror in the URL.

Query parameters: ``models`` (comma-separated model tokens), ``images``, ``device`` and page-specific keys.
A model token is a spec string, optionally followed by ``|`` and preprocessing overrides, e.g.
``weights:/srv/uploads/ab12.pt|size=32;crop=1;mean=0.49/0.48/0.45;std=0.25/0.24/0.26``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from fl_core.io.images import BUNDLED
from fl_core.io.preprocessing import InputConfig, Overrides

DEFAULT_MODELS = ("demo:tiny_vgg", "demo:tiny_vgg_init")


@dataclass(frozen=True)
class Selection:
    """What the sidebar selected; pages read it from ``st.session_state["selection"]``."""

    specs: tuple[str, ...]
    overrides: dict[str, dict] = field(default_factory=dict)
    images: str = BUNDLED
    device: str = "auto"

    def overrides_of(self, spec: str) -> Overrides:
        """Hashable overrides of one model (cache key)."""
        return InputConfig.overrides(self.overrides.get(spec, {}))

    def model_keys(self) -> tuple[tuple[str, tuple], ...]:
        """``(spec, overrides)`` of every selected model: the argument of the cached analyses."""
        return tuple((spec, self.overrides_of(spec)) for spec in self.specs)


def encode_token(spec: str, overrides: dict) -> str:
    """``spec|overrides`` (:meth:`~fl_core.io.preprocessing.InputConfig.overrides_to_text`), or the spec alone."""
    return f"{spec}|{InputConfig.overrides_to_text(overrides)}" if overrides else spec


def decode_token(token: str) -> tuple[str, dict]:
    """Split a model token into its spec and overrides (unknown or malformed override fields are ignored)."""
    spec, _, text = token.partition("|")
    return spec.strip(), InputConfig.overrides_from_text(text)


def selection_from_url() -> Selection:
    """The selection encoded in the query parameters (defaults: the demo models, bundled photos, auto device)."""
    params = st.query_params
    tokens = [t for t in params.get("models", ",".join(DEFAULT_MODELS)).split(",") if t.strip()]
    decoded = [decode_token(t) for t in tokens]
    return Selection(specs=tuple(s for s, _ in decoded), overrides={s: o for s, o in decoded if o},
                     images=params.get("images", BUNDLED), device=params.get("device", "auto"))


def write_selection_to_url(selection: Selection) -> None:
    """Mirror the selection into the query parameters (so a copied URL restores it)."""
    tokens = ",".join(encode_token(s, selection.overrides.get(s, {})) for s in selection.specs)
    wanted = {"models": tokens, "images": selection.images, "device": selection.device}
    for key, value in wanted.items():
        if st.query_params.get(key) != value:
            st.query_params[key] = value


def current_selection() -> Selection:
    """The sidebar's selection for this run."""
    return st.session_state.get("selection") or selection_from_url()


def page_param(key: str, default: str) -> str:
    """A page-specific query parameter (e.g. the chosen layer)."""
    return st.query_params.get(key, default)


def set_page_param(key: str, value: str) -> None:
    if st.query_params.get(key) != value:
        st.query_params[key] = value
