"""The user's selection (models, preprocessing overrides, images, device) and its mirror in the URL.

Query parameters: ``models`` (comma-separated model tokens), ``images``, ``device`` and page-specific keys.
A model token is a spec string, optionally followed by ``|`` and preprocessing overrides, e.g.
``weights:/srv/uploads/ab12.pt|size=32;crop=1;mean=0.49/0.48/0.45;std=0.25/0.24/0.26``.

The URL is untrusted input: page-specific values are read with :func:`url_param` / :func:`url_setting`, which parse
them like the widget's value (kind, bounds, choices: :func:`fl_core.settings.parse_setting`) and fall back to the
default with a notice naming the parameter (:func:`url_notices`, shown at the top of the page) when they do not
parse; :func:`set_url_param` writes a widget's value back, so a copied URL restores the whole view.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import streamlit as st

from fl_core.compute.device import available_devices
from fl_core.errors import FilterLensError, ModelSpecError
from fl_core.io.images import BUNDLED
from fl_core.io.preprocessing import InputConfig, Overrides
from fl_core.io.sources import is_bundled
from fl_core.io.specs import ModelSpec
from fl_core.settings import SettingField, parse_setting, path_text_problem, printable
from fl_ui.messages import show

T = TypeVar("T")
NOTICES_KEY = "url_notices"

DEFAULT_MODELS = ("demo:squeezenet1_0", "torchvision:squeezenet1_0")
"""The sidebar's models before any choice: a real ImageNet first layer (SqueezeNet 1.0, 96 filters of 7×7) beside a
random init of the same architecture, so Home, Energy Profiles and Whitening open on the effects the paper reports."""
LATEST_SEEN_KEY = "page_model_latest"


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


def default_selection() -> Selection:
    """The selection before any choice: :data:`DEFAULT_MODELS` on the bundled photos, device chosen automatically."""
    return Selection(specs=DEFAULT_MODELS)


def selection_from_url() -> Selection:
    """The selection encoded in the query parameters (defaults: the demo models, bundled photos, auto device).

    Each value is checked before anything uses it; an invalid one falls back with a notice naming the parameter
    (:func:`url_notices`): model tokens that are not specs (:func:`model_from_url`) are dropped, and so are their
    repeats and those past :data:`MAX_URL_MODELS`; preprocessing overrides out of range are dropped; an image source
    that names no possible folder is the bundled photos; an unknown device is ``auto``.
    """
    params = st.query_params
    text = params.get("models")
    tokens = DEFAULT_MODELS if text is None else tuple(dict.fromkeys(t for t in text.split(",") if t.strip()))
    decoded: dict[str, dict] = {}
    for token in tokens[:MAX_URL_TOKENS]:
        if (model := model_from_url(token)) is not None and model[0] not in decoded:
            decoded[model[0]] = model[1]
    if len(decoded) > MAX_URL_MODELS or len(tokens) > MAX_URL_TOKENS:
        _notice("models", text or "", f"it names {len(tokens):,} models; the first {MAX_URL_MODELS} usable ones "
                "are shown", ",".join(list(decoded)[:MAX_URL_MODELS]))
        decoded = dict(list(decoded.items())[:MAX_URL_MODELS])
    return Selection(specs=tuple(decoded), overrides={s: o for s, o in decoded.items() if o},
                     images=_images_from_url(params.get("images")), device=_device_from_url(params.get("device")))


MAX_URL_MODELS = 8
"""The most models a URL selects (the pages compare a few models side by side)."""
MAX_URL_TOKENS = 4 * MAX_URL_MODELS
"""The most distinct model tokens of a URL that are read (each unusable one is a notice)."""


def model_from_url(token: str) -> tuple[str, dict] | None:
    """``(spec, overrides)`` of one model token of the URL, or ``None`` (with a notice) when the spec cannot be one
    (:meth:`fl_core.io.specs.ModelSpec.parse`); overrides out of the preprocessing's range are dropped, with a
    notice."""
    spec, overrides = decode_token(token)
    try:
        ModelSpec.parse(spec)
    except ModelSpecError as err:
        _notice("models", token, str(err).rstrip("."), instead="It was left out.")
        return None
    try:
        InputConfig().with_overrides(**overrides)
    except FilterLensError as err:  # out of range, or over the memory budget (budgets.check_scaled_images)
        _notice("models", token, f"its preprocessing {str(err).rstrip('.')}", spec)
        overrides = {}
    return spec, overrides


def _images_from_url(text: str | None) -> str:
    if text is None or is_bundled(text):
        return BUNDLED
    if problem := path_text_problem(text):
        _notice("images", text, f"it names no folder: {problem}", BUNDLED)
        return BUNDLED
    return text


def _device_from_url(text: str | None) -> str:
    devices = ("auto", *available_devices())
    if text is None or text in devices:
        return text or "auto"
    _notice("device", text, f"this server has {', '.join(devices)}", "auto")
    return "auto"


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


def url_setting(key: str, field: SettingField, default: Any = None) -> Any:
    """The query parameter ``key`` as ``field``'s value (kind, bounds and choices checked); ``default`` (the field's
    own when ``None``) when it is absent, or when it does not parse, with a notice naming the parameter."""
    default = field.default if default is None else default
    raw = st.query_params.get(key)
    if raw is None:
        return default
    try:
        return parse_setting(field, raw)
    except ValueError as err:
        _notice(key, raw, str(err).replace(field.option, f"'{key}'"), default)
        return default


def value_field(key: str, default: Any, *, choices: Sequence[Any] | None = None, minimum: float | None = None,
                maximum: float | None = None) -> SettingField:
    """A setting field for a value like ``default`` (bool, int, float, str or a tuple of those) named ``key``."""
    kind = type(default)
    item = type(default[0]) if kind is tuple and default else (str if kind is tuple else None)
    return SettingField(key, kind, item, False, default, "", tuple(choices) if choices is not None else None,
                        minimum, maximum, key)


def url_param(key: str, default: T, *, choices: Sequence[Any] | None = None, minimum: float | None = None,
              maximum: float | None = None) -> T:
    """The query parameter ``key`` parsed like ``default`` (bool, int, float, str or a tuple of those), within
    ``choices`` / ``[minimum, maximum]``; ``default`` when absent or invalid (:func:`url_setting`)."""
    return url_setting(key, value_field(key, default, choices=choices, minimum=minimum, maximum=maximum), default)


def url_text(value: Any) -> str:
    """A widget value as its query-parameter text: ``1``/``0`` for booleans, comma-separated tuples."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple | list):
        return ",".join(map(url_text, value))
    return str(value)


def set_url_param(key: str, value: Any) -> None:
    """Write a widget's value into the query parameters (only when it changed: every write is a browser update)."""
    text = url_text(value)
    if st.query_params.get(key) != text:
        st.query_params[key] = text


def _notice(key: str, raw: str, reason: str, default: Any = None, *, instead: str | None = None) -> None:
    """Say once, above the page, that the URL's ``key`` (``raw``) was not used, why, and what is shown instead
    (``default``, or the sentence ``instead``)."""
    shown = raw if len(raw) <= 40 else raw[:40] + "…"
    message = printable(f"The link's value of '{key}' ({shown!r}) was not used: {reason}. "
                        f"{instead or f'Showing {url_text(default)!r}.'}")
    notices = st.session_state.setdefault(NOTICES_KEY, [])
    if message not in notices:
        notices.append(message)


def url_notices() -> list[str]:
    """The notices about URL values this run could not use (each said once), emptied as they are read."""
    return st.session_state.pop(NOTICES_KEY, [])


@contextlib.contextmanager
def url_notices_above() -> Iterator[None]:
    """Run a page inside; then show, above it, the URL values it could not use (:func:`url_notices`)."""
    slot = st.container()
    try:
        yield
    finally:
        with slot:
            for message in url_notices():
                show(st.warning, "{}", message, icon="🔗")


def latest_added_model(selection: Selection, offered: Callable[[str], bool] = lambda spec: True) -> str | None:
    """The model the user added to the sidebar last (sidebar order; the :data:`DEFAULT_MODELS` do not count) among
    those ``offered`` says a page can show, or ``None``."""
    return next((s for s in reversed(selection.specs) if s not in DEFAULT_MODELS and offered(s)), None)


def page_model(label: str, options: Sequence[str], default: str, *, key: str, container: Any = st,
               spec_of: Callable[[str], str | None] = lambda option: option, url_key: str | None = None,
               **widget: Any) -> str:
    """Every page's model picker, under one rule for which model a page shows:

    1. when the model the user added to the sidebar last changes (:func:`latest_added_model`), every page that
       offers it switches to it;
    2. otherwise the page keeps the choice made in its picker (restored from the URL parameter ``url_key``, by
       default ``key``);
    3. otherwise the page shows the sidebar's latest added model it offers, else its offline ``default``.

    Args:
        options: what the page can show (spec strings or the page's own ids), ``default`` among them.
        spec_of: the model spec an option stands for (``None`` for options that are not a sidebar model).
        widget: passed on to ``st.selectbox`` (``format_func``, ``help``, ...).
    """
    url_key = url_key or key
    by_spec = {spec_of(o): o for o in options if spec_of(o) is not None}
    latest = by_spec.get(latest_added_model(current_selection(), lambda spec: spec in by_spec))
    seen = st.session_state.setdefault(LATEST_SEEN_KEY, {})
    added_now = key in seen and latest is not None and seen[key] != latest
    seen[key] = latest
    if added_now:
        value = latest
    elif st.session_state.get(key) in options:
        value = st.session_state[key]
    else:
        value = url_param(url_key, latest or default, choices=options)
    st.session_state[key] = value
    chosen = container.selectbox(label, list(options), key=key, **widget)
    set_url_param(url_key, chosen)
    return chosen


def page_param(key: str, default: str) -> str:
    """A page-specific text parameter (e.g. the chosen layer); prefer :func:`url_param` for typed values."""
    return url_param(key, default)


def set_page_param(key: str, value: str) -> None:
    set_url_param(key, value)
