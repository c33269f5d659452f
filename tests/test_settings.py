"""Settings classes as the one source of defaults, help, bounds and choices for command lines."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

import pytest

from fl_core.settings import (
    Settings,
    add_settings_arguments,
    attribute_help,
    plain_text,
    replace_settings,
    setting,
    setting_value,
    settings_fields,
    settings_from_args,
    settings_to_argv,
)


@dataclass(frozen=True)
class Inner(Settings):
    """Inner estimator.

    Attributes:
        k: peers per channel, a long help text that goes on
            over a second line.
        seed: seeds everything.
    """

    k: int = setting(8, minimum=1)
    seed: int = 0


@dataclass(frozen=True)
class Outer(Settings):
    """Outer analysis.

    Attributes:
        inner: the estimator.
        kinds: what to run.
        fractions, rate: numbers.
        keep: keep things.
        limit: at most this many (None: all).
        name: a name.
    """

    inner: Inner = field(default_factory=Inner)
    kinds: tuple[str, ...] = setting(("a", "b"), choices=("a", "b", "c"), flag="run")
    fractions: tuple[float, ...] = (0.25, 0.5)
    rate: float = setting(1e-3, minimum=0.0, maximum=1.0)
    keep: bool = True
    limit: int | None = None
    name: str = "x"


def parse(argv: list[str]) -> Outer:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--seed", type=int, default=5)  # the command's own option, shared by the settings
    add_settings_arguments(parser, Outer)
    return settings_from_args(Outer, parser.parse_args(argv))


def test_help_comes_from_the_attributes_docstring_with_continuations_and_shared_lines():
    helps = attribute_help(Outer)
    assert helps["fractions"] == helps["rate"] == "numbers."
    assert attribute_help(Inner)["k"] == "peers per channel, a long help text that goes on over a second line."
    fields = {f.name: f for f in settings_fields(Outer)}
    assert list(fields) == ["k", "seed", "kinds", "fractions", "rate", "keep", "limit", "name"]  # nested flattened
    assert fields["kinds"].kind is tuple and fields["kinds"].item is str and fields["kinds"].option == "--run"
    assert fields["limit"].optional and fields["limit"].kind is int


def test_no_options_give_the_class_defaults_and_the_commands_shared_option_feeds_nested_settings():
    assert parse([]) == Outer(inner=Inner(seed=5))
    assert parse(["--seed", "0"]) == Outer()


def test_options_round_trip_every_kind_of_field():
    got = parse(["--k", "3", "--run", "c", "a", "--fractions", "0.1", "--rate", "0.5", "--no-keep", "--limit", "7",
                 "--name", "y"])
    assert got == Outer(inner=Inner(k=3, seed=5), kinds=("c", "a"), fractions=(0.1,), rate=0.5, keep=False, limit=7,
                        name="y")
    assert parse(["--run"]).kinds == ()  # an empty tuple: run nothing
    assert parse(["--limit", "none"]).limit is None
    assert hash(got) == hash(parse(["--k", "3", "--run", "c", "a", "--fractions", "0.1", "--rate", "0.5",
                                    "--no-keep", "--limit", "7", "--name", "y"]))  # usable as a cache key


@pytest.mark.parametrize(("argv", "says"), [(["--k", "0"], "--k must be at least 1, not 0"),
                                            (["--rate", "2"], "--rate must be at least 0.0 and at most 1.0, not 2"),
                                            (["--run", "d"], "--run must be one of a, b, c, not str 'd'")])
def test_bounds_and_choices_are_enforced_with_a_message_that_names_the_option(argv, says):
    with pytest.raises(argparse.ArgumentError, match=re.escape(says)):
        parse(argv)


def test_given_values_win_and_excluded_fields_keep_their_defaults():
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, Outer, exclude=("name",), defaults={"rate": 0.25})
    args = parser.parse_args([])
    assert not hasattr(args, "name")
    assert settings_from_args(Outer, args, keep=False) == Outer(rate=0.25, keep=False)


def test_nested_fields_are_read_and_replaced_by_their_own_names():
    settings = Outer(inner=Inner(k=3))
    assert setting_value(settings, "k") == 3 and setting_value(settings, "rate") == 1e-3
    assert replace_settings(settings, {"seed": 9, "keep": False}) == Outer(inner=Inner(k=3, seed=9), keep=False)
    with pytest.raises(KeyError):
        setting_value(settings, "nothing")


def test_help_may_hold_a_percent_sign():
    @dataclass(frozen=True)
    class Rates:
        """Rates.

        Attributes:
            lr: step size (10 steps took top-1 from 45 % to 53 %).
        """

        lr: float = 1e-3

    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, Rates)
    assert "from 45 % to 53 %). (default: 0.001)" in " ".join(parser.format_help().split())


def test_help_reads_as_plain_text_without_docstring_markup():
    assert plain_text("see :func:`~fl_core.io.models.load_model` or :mod:`fl_core.io` (``None``: all)") == (
        "see load_model or fl_core.io (None: all)")


@pytest.mark.parametrize("settings", [Outer(), Outer(inner=Inner(k=3, seed=5), kinds=("c",), fractions=(), rate=0.5,
                                                     keep=False, limit=7, name="two words")])
def test_the_options_of_a_settings_object_parse_back_into_it(settings):
    argv = settings_to_argv(settings)
    assert parse(["--seed", str(settings.inner.seed), *argv]) == settings
    assert settings_to_argv(Outer()) == []  # defaults are left out
    assert settings_to_argv(Outer(limit=7), exclude=("limit",)) == []
