"""Form widgets built from a settings class (:mod:`fl_core.settings`): the default, help, bounds and choices of each
widget come from the class, so a page never re-types them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import streamlit as st

from fl_core.errors import ArgumentError
from fl_core.settings import SettingField, parse_setting, replace_settings, setting_value, settings_fields
from fl_ui.messages import show
from fl_ui.state import set_url_param, url_setting, url_text


def setting_widget(field: SettingField, label: str, *, key: str, value: Any = None, container: Any = st,
                   slider: bool = False, **options: Any) -> Any:
    """One widget for ``field``: a checkbox (bool), a multiselect (a tuple with choices), a select box (choices), a
    number input — or with ``slider`` a slider — within the field's bounds (int/float; ``min_value``/``max_value``
    options narrow them for the page), a text input of comma-separated values for a tuple without choices (checked
    against the field: an invalid entry is said under it and ``value`` kept) or a text input, starting at ``value``
    (default: the field's default) with the field's help; ``options`` go to the widget (e.g. ``step``, ``format``,
    ``disabled``)."""
    value = field.default if value is None else value
    options.setdefault("help", field.help or None)
    if field.kind is bool:
        return container.checkbox(label, value=bool(value), key=key, **options)
    if field.kind is tuple and field.choices is not None:
        return tuple(container.multiselect(label, list(field.choices), default=list(value), key=key, **options))
    if field.choices is not None:
        choices = list(field.choices)
        return container.selectbox(label, choices, index=choices.index(value), key=key, **options)
    if field.kind in (int, float):
        kind = field.kind
        bounds = {name: kind(bound) for name, bound in (("min_value", field.minimum), ("max_value", field.maximum))
                  if bound is not None}
        widget = container.slider if slider else container.number_input
        return kind(widget(label, value=kind(value), key=key, **{**bounds, **options}))
    if field.kind is tuple:
        text = container.text_input(label, value=url_text(value), key=key, **options)
        try:
            return parse_setting(field, text, label)
        except ArgumentError as err:
            show(container.error, "{}", err)
            return value
    return container.text_input(label, value=str(value), key=key, **options)


def settings_widgets(cls: type, labels: Mapping[str, str], *, key: str, base: Any = None, container: Any = st,
                     options: Mapping[str, Mapping[str, Any]] | None = None, url: bool = False) -> Any:
    """Widgets for the fields named in ``labels`` (in that order, nested settings' fields by their own names), and the
    settings they give: ``base`` (default: ``cls()``) with those fields replaced.

    Args:
        labels: field name → widget label.
        key: prefix of the widgets' keys (``{key}_{field}``).
        base: the settings the widgets start from.
        options: per field, extra widget arguments (``min_value``/``max_value`` narrow the field's bounds).
        url: each widget starts from, and writes back to, the query parameter ``{key}_{field}`` (checked against
            the field and the page's bounds; an invalid value falls back to ``base``'s with a notice).
    """
    base = cls() if base is None else base
    fields = {f.name: f for f in settings_fields(cls)}
    values = {}
    for name, label in labels.items():
        field, extra = fields[name], (options or {}).get(name, {})
        start = setting_value(base, name)
        if url:
            narrowed = replace(field, minimum=extra.get("min_value", field.minimum),
                               maximum=extra.get("max_value", field.maximum))
            start = url_setting(f"{key}_{name}", narrowed, start)
        values[name] = setting_widget(field, label, key=f"{key}_{name}", value=start, container=container, **extra)
        if url:
            set_url_param(f"{key}_{name}", values[name])
    return replace_settings(base, values)
