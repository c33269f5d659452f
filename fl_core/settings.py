"""Settings as data: every analysis takes one frozen settings dataclass, and its defaults and rules live there only.

A settings class is a ``@dataclass(frozen=True)`` subclass of :class:`Settings` whose Google-style ``Attributes:``
docstring says what each field means. :func:`settings_fields` reads the fields (name, type, default, that help text
and the optional bounds and choices given by :func:`setting`); every object is checked against them when it is built
(:func:`check_setting`: type, bounds, choices), so the library, the command line, the widgets and the URL refuse the
same values with the same :class:`~fl_core.errors.ArgumentError`. :func:`add_settings_arguments` turns the fields into
``argparse`` options and :func:`settings_from_args` reads them back, so the command line never re-types a default.
The dashboard builds its form widgets from the same fields (``fl_ui.forms``), and a frozen settings object is
hashable, so it is the cache key.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import math
import numbers
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import MISSING, dataclass
from typing import Any

from fl_core.errors import ArgumentError, value_text

MAX_SEED = 2**32 - 1
"""The largest seed (NumPy's and PyTorch's generators take any seed below 2³²)."""
MAX_IMAGES = 100_000
"""The most images an analysis reads or a count of images may ask for (ImageNet's validation split is 50,000)."""
MAX_STEPS = 20_000
"""The most optimisation steps a run may ask for (the shipped Training Lab runs take 400 to 4,000)."""
MAX_ITEMS = 128
"""The most values a tuple setting takes (fractions, sweeps, widths, snapshot steps)."""
MIN_LEARNING_RATE = 1e-6
"""The smallest step size of a training or a recovery (a step of 0 would not move)."""


def setting(default: Any = MISSING, *, choices: Sequence[Any] | None = None, minimum: float | None = None,
            maximum: float | None = None, flag: str | None = None, help: str | None = None,
            default_factory: Any = MISSING) -> Any:
    """A dataclass field with the bounds, choices or command-line flag its widgets and options need.

    Args:
        default, default_factory: as in :func:`dataclasses.field`.
        choices: the values allowed (for a tuple field: the values its items may take).
        minimum, maximum: inclusive bounds of a number.
        flag: the command-line option without ``--`` when it differs from the field's name with dashes.
        help: the help of options and widgets when it is derived from data (e.g. the registered families);
            otherwise the class's ``Attributes:`` docstring says it.
    """
    metadata = {"choices": tuple(choices) if choices is not None else None, "minimum": minimum, "maximum": maximum,
                "flag": flag, "help": help}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass(frozen=True)
class SettingField:
    """One field of a settings class, as forms and command lines need it.

    Attributes:
        name: the attribute's name.
        kind: ``int``, ``float``, ``bool``, ``str`` or ``tuple`` (of ``item``).
        item: the item type of a tuple field.
        optional: ``None`` is allowed.
        default: the default value.
        help: the field's line(s) of the class's ``Attributes:`` docstring.
        choices, minimum, maximum, flag: as given to :func:`setting`.
        length: the number of items of a fixed-length tuple (``tuple[float, float, float]``: 3).
    """

    name: str
    kind: type
    item: type | None
    optional: bool
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    flag: str | None = None
    length: int | None = None

    @property
    def option(self) -> str:
        """The command-line option: ``--`` + the flag or the name with dashes."""
        return "--" + (self.flag or self.name.replace("_", "-"))

    @property
    def nested(self) -> bool:
        """The field holds a settings object of its own."""
        return dataclasses.is_dataclass(self.kind)

    def scalar(self) -> SettingField:
        """This field as one value: a tuple field's items, a number without ``None``."""
        return dataclasses.replace(self, kind=self.item or self.kind, item=None, optional=False, length=None)


def plain_text(text: str) -> str:
    """Docstring markup as plain text for ``--help`` and widget tooltips: ````x```` → x, ``:func:`~a.b``` → b."""
    text = re.sub(r":\w+:`~([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    return re.sub(r":\w+:`([^`]+)`|``([^`]+)``", lambda m: m.group(1) or m.group(2), text)


def attribute_help(cls: type) -> dict[str, str]:
    """Each attribute's text in the ``Attributes:`` section of ``cls``'s docstring (``a, b: text`` documents both),
    continuation lines joined."""
    doc = cls.__doc__ or ""
    section = re.split(r"\n\s*Attributes:\s*\n", doc, maxsplit=1)
    if len(section) < 2:
        return {}
    helps: dict[str, str] = {}
    names: list[str] = []
    indent = None
    for line in section[1].splitlines():
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        match = re.match(r"\s*([\w, ]+):\s*(.*)", line)
        if depth == indent and match:
            names = [n.strip() for n in match.group(1).split(",")]
            for name in names:
                helps[name] = match.group(2).strip()
        elif depth > indent and names:
            for name in names:
                helps[name] += " " + line.strip()
        elif depth < indent:
            break
    return helps


def _kind(hint: Any) -> tuple[type, type | None, bool, int | None]:
    """``(kind, item type, optional, fixed length)`` of a field's type hint."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        kind, item, _, length = _kind(next(a for a in args if a is not type(None)))
        return kind, item, True, length
    if typing.get_origin(hint) is tuple:
        return tuple, args[0], False, None if args[-1] is Ellipsis else len(args)
    return hint, None, False, None


@functools.cache
def own_fields(cls: type) -> tuple[SettingField, ...]:
    """The fields of a settings dataclass as declared (a nested settings class is one field of that kind); a
    subclass's fields are documented by its own ``Attributes:`` and those of its bases."""
    hints = typing.get_type_hints(cls)
    helps = {name: text for klass in reversed(cls.__mro__) for name, text in attribute_help(klass).items()}
    fields = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not MISSING or not callable(f.default_factory) else f.default_factory()
        meta = f.metadata
        kind, item, optional, length = _kind(hints[f.name])
        fields.append(SettingField(f.name, kind, item, optional, default,
                                   plain_text(meta.get("help") or helps.get(f.name, "")),
                                   meta.get("choices"), meta.get("minimum"), meta.get("maximum"), meta.get("flag"),
                                   length))
    return tuple(fields)


def settings_fields(cls: type) -> list[SettingField]:
    """The fields of a settings dataclass, nested settings classes flattened in place (their fields follow on)."""
    fields: list[SettingField] = []
    for field in own_fields(cls):
        fields += settings_fields(field.kind) if field.nested and not field.optional else [field]
    return fields


DEVICE_NAME = re.compile(r"auto|cpu|mps|cuda(:[0-9]{1,3})?")
"""The device names FilterLens takes (``device=``, ``--device``, ``FL_DEVICE``)."""


def device_name(value: Any, argument: str = "device") -> str:
    """``value`` if it names a device (:data:`DEVICE_NAME`): checked without torch, so the command line refuses an
    unknown one before any analysis loads (whether this machine has it, :func:`fl_core.compute.device.resolve_device`
    says).

    Raises:
        ArgumentError: not a device name.
    """
    if not isinstance(value, str) or not DEVICE_NAME.fullmatch(value.strip()):
        raise ArgumentError(f"{argument} must be auto, cpu, cuda, cuda:N or mps, not {value_text(value)}")
    return value.strip()


MAX_TEXT_LENGTH = 4096
"""The longest text a setting takes from a URL or form (paths and specs are far shorter)."""
MAX_NAME_BYTES = 255
"""The longest file or folder name the file systems FilterLens runs on allow (NAME_MAX)."""


def path_text_problem(text: str) -> str | None:
    """Why ``text`` (a path, or a model spec holding one) names nothing any file system holds, or ``None``: longer
    than :data:`MAX_TEXT_LENGTH`, a NUL character, not UTF-8 (a name in another encoding, read as surrogates), or a
    part over :data:`MAX_NAME_BYTES` bytes."""
    if len(text) > MAX_TEXT_LENGTH:
        return f"it is {len(text):,} characters long, over the {MAX_TEXT_LENGTH:,} allowed"
    if "\x00" in text:
        return "it contains a NUL character, which no file name has"
    try:
        longest = max(len(part.encode("utf-8")) for part in text.split("/"))
    except UnicodeEncodeError:
        return "it is not UTF-8 text (a name in another encoding?): rename it to a UTF-8 name"
    if longest > MAX_NAME_BYTES:
        return f"it has a name of {longest:,} bytes, longer than file systems allow ({MAX_NAME_BYTES})"
    return None


def printable(text: str) -> str:
    """``text`` safe to show and to send to a browser: a name read from a file system in another encoding (held as
    surrogates) gets U+FFFD for each undecodable byte."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


KIND_NAMES = {bool: ("True or False", "booleans"), int: ("an integer", "integers"), float: ("a number", "numbers"),
              str: ("a string", "strings")}
"""How a message names each kind of value, one and several."""


def expected(field: SettingField) -> str:
    """What ``field`` takes, for a message: ``an integer from 1 to 64``, ``a list or tuple of strings among a, b``."""
    low, high = field.minimum, field.maximum
    bounds = f" from {low:,} to {high:,}" if low is not None and high is not None else ""
    if field.choices is not None:
        bounds = f" among {', '.join(map(str, field.choices))}"
    kind = field.scalar().kind
    one, several = KIND_NAMES.get(kind, (f"a {getattr(kind, '__name__', kind)}",) * 2)
    text = f"a list or tuple of {several}" if field.kind is tuple else one
    return text + bounds + (", or None" if field.optional else "")


def check_setting(field: SettingField, value: Any, name: str | None = None) -> Any:
    """``value`` as ``field`` holds it, or an :class:`ArgumentError` naming the setting (``name``, default the field's
    name), the value and what is allowed.

    The one rule of every door (library, command line, widgets, URL): the type (an int is fine for a float, a bool is
    not a number; a tuple field takes a list or tuple of at most :data:`MAX_ITEMS` values, never a string), finite
    numbers within the field's bounds, and its choices. Lists become tuples and numbers plain ``int``/``float``, so a
    settings object stays hashable and JSON-safe.
    """
    name = name or field.name
    if value is None:
        if field.optional:
            return None
        raise ArgumentError(f"{name} must be {expected(field)}, not None")
    if field.kind is not tuple:
        return _checked_value(field, value, name)
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ArgumentError(f"{name} must be {expected(field)}, not {value_text(value)}")
    items = tuple(itertools.islice(value, MAX_ITEMS + 1))
    if len(items) > MAX_ITEMS:
        given = f"{len(value):,}" if isinstance(value, Sized) else "more"
        raise ArgumentError(f"{name} takes at most {MAX_ITEMS} values, not {given}")
    if field.length is not None and len(items) != field.length:
        raise ArgumentError(f"{name} takes {field.length} values, not {len(items)}")
    item_field = field.scalar()
    return tuple(_checked_value(item_field, item, name) for item in items)


def _checked_value(field: SettingField, value: Any, name: str) -> Any:
    """One value of ``field``'s kind: its type, then its bounds and choices."""
    kind = field.kind
    if isinstance(value, bool) and kind is not bool:
        raise ArgumentError(f"{name} must be {expected(field)}, not {value_text(value)}")
    if kind is float and isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise ArgumentError(f"{name} must be a finite number, not {value}")
    elif kind is int and isinstance(value, numbers.Integral):
        value = int(value)
    elif kind is str and isinstance(value, os.PathLike):
        value = os.fspath(value)
    elif not isinstance(value, kind):
        raise ArgumentError(f"{name} must be {expected(field)}, not {value_text(value)}")
    low, high = field.minimum, field.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        bound = " and ".join(f"at {side} {limit:,}" for side, limit in (("least", low), ("most", high))
                             if limit is not None)
        raise ArgumentError(f"{name} must be {bound}, not {value:,}")
    if field.choices is not None and value not in field.choices:
        raise ArgumentError(f"{name} must be one of {', '.join(map(str, field.choices))}, not {value_text(value)}")
    return value


@dataclass(frozen=True)
class Settings:
    """The base of every settings class: each field is checked by :func:`check_setting` when an object is built
    (``cls(...)``, ``dataclasses.replace``, keyword overrides), and lists become tuples."""

    def __post_init__(self) -> None:
        cls: type = type(self)
        for field in own_fields(cls):
            object.__setattr__(self, field.name, check_setting(field, getattr(self, field.name)))


def parse_scalar(kind: type, text: str) -> Any:
    """One value of ``kind`` from text: ``1/0/true/false/yes/no/on/off`` for booleans, ``int``/``float``/``str``."""
    if kind is bool:
        lowered = text.strip().lower()
        if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise ValueError(f"not a yes/no value: {text!r}")
        return lowered in ("1", "true", "yes", "on")
    if "\x00" in text:
        raise ValueError("a NUL character is not allowed")
    if len(text) > MAX_TEXT_LENGTH:
        raise ValueError(f"not a value: longer than {MAX_TEXT_LENGTH:,} characters")
    if kind in (int, float) and not text.isascii():  # int() and float() read other scripts' digits too: '٥٦' is 56
        raise ValueError(f"not a number: {printable(text[:40])!r} (write numbers with the digits 0-9)")
    return kind(text.strip()) if kind in (int, float) else kind(text)


def parse_setting(field: SettingField, text: str, name: str | None = None) -> Any:
    """``text`` (a URL or form value) as ``field``'s value, checked by :func:`check_setting` under ``name`` (default:
    the field's option): tuples are comma-separated, ``none`` is ``None`` for optional fields."""
    name = name or field.option
    if field.optional and text.strip().lower() == "none":
        return None
    try:
        if field.kind is tuple:
            value: Any = tuple(parse_scalar(field.scalar().kind, item) for item in text.split(",") if item.strip())
        else:
            value = parse_scalar(field.kind, text)
    except ValueError as err:
        raise ArgumentError(f"{name}: {err}" if str(err).startswith(("not", "a NUL")) else
                            f"{name} must be {expected(field)}, not {text!r}") from None
    return check_setting(field, value, name)


def option_type(field: SettingField) -> Any:
    """An argparse ``type`` for one value of ``field`` (a tuple field's items; ``none`` for an optional one): parsed
    from text (a malformed number is argparse's ``invalid int value``), then :func:`check_setting` under the option's
    name, so a bad value is refused while the command line is read, before any analysis module loads."""
    one = field.scalar()

    def parse(text: str) -> Any:
        if field.optional and field.kind is not tuple and text.strip().lower() == "none":
            return None
        value = parse_scalar(one.kind, text)
        try:
            return check_setting(one, value, field.option)
        except ArgumentError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = getattr(one.kind, "__name__", "value")
    return parse


def bounded(kind: type, minimum: float | None = None, maximum: float | None = None, option: str = "value") -> Any:
    """An argparse ``type`` for an option of the command itself (no analysis setting): ``kind`` within
    ``[minimum, maximum]``, an error naming ``--option`` otherwise."""
    return option_type(SettingField(option, kind, None, False, None, "", None, minimum, maximum, option))


def add_settings_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, *,
                           exclude: Sequence[str] = (), defaults: dict[str, Any] | None = None) -> None:
    """Add one option per field of ``cls`` (:func:`settings_fields`), its default and help from the class.

    Booleans get ``--flag/--no-flag``, tuples take several values (none for an empty tuple), optional numbers take
    ``none``. A field whose option the parser already has (e.g. one ``--seed`` for several settings) is skipped.

    Args:
        exclude: field names left out (set by the command itself).
        defaults: defaults that differ on this command line (the class's own are used otherwise).
    """
    taken = {o for a in getattr(parser, "_actions", []) for o in a.option_strings}
    for field in settings_fields(cls):
        if field.name in exclude or field.option in taken:
            continue
        default = (defaults or {}).get(field.name, field.default)
        shown = " (default: %(default)s)" if default not in (None, ()) else ""
        kwargs: dict[str, Any] = {"dest": field.name, "help": field.help.replace("%", "%%") + shown}
        if field.kind is bool:
            kwargs.update(action=argparse.BooleanOptionalAction, default=default)
        else:
            listed = field.kind is tuple and default is not None
            kwargs.update(type=option_type(field), default=list(default) if listed else default)
            if field.choices is not None:
                kwargs["metavar"] = "{" + ",".join(map(str, field.choices)) + "}"
            if field.kind is tuple:
                kwargs["nargs"] = field.length or "*"
        parser.add_argument(field.option, **kwargs)
        taken.add(field.option)


def settings_to_argv(settings: Any, *, exclude: Sequence[str] = ()) -> list[str]:
    """The command-line options (:func:`add_settings_arguments`) that give back ``settings``: fields at their
    default and ``exclude`` left out, so :func:`settings_from_args` of the parsed options is ``settings``."""
    argv: list[str] = []
    for field in settings_fields(type(settings)):
        value = setting_value(settings, field.name)
        if field.name in exclude or value == field.default:
            continue
        if field.kind is bool:
            argv.append(field.option if value else f"--no-{field.option[2:]}")
        else:
            argv += [field.option, *map(str, value if field.kind is tuple else ["none" if value is None else value])]
    return argv


def settings_from_args(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """Build ``cls`` from parsed options (:func:`add_settings_arguments`), nested settings included; ``given`` values
    (the command's own) win, and fields the options do not carry keep their defaults."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
        elif dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = settings_from_args(hints[f.name], args, **given)
        elif hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
    return cls(**values)


def setting_value(settings: Any, name: str) -> Any:
    """The field ``name`` of ``settings`` or of a settings object nested in it (:class:`KeyError` if none)."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.name == name:
            return value
        if dataclasses.is_dataclass(value):
            try:
                return setting_value(value, name)
            except KeyError:
                continue
    raise KeyError(name)


def replace_settings(settings: Any, values: Mapping[str, Any]) -> Any:
    """``settings`` with ``values`` replaced, in nested settings objects too (fields by their own names)."""
    own = {f.name for f in dataclasses.fields(settings)}
    changes = {name: value for name, value in values.items() if name in own}
    for f in dataclasses.fields(settings):
        nested = getattr(settings, f.name)
        if dataclasses.is_dataclass(nested) and f.name not in changes:
            changes[f.name] = replace_settings(nested, values)
    return dataclasses.replace(settings, **changes)

