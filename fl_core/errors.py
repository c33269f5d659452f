"""Exceptions that reach users. Every message says what went wrong *and* what to do about it."""


class FilterLensError(Exception):
    """Base class: the message is shown to the user as is (``st.error`` or a one-line CLI error)."""


class ModelSpecError(FilterLensError):
    """A model spec string (``timm:NAME``, ``weights:PATH``, ...) could not be understood or resolved."""


class CheckpointError(FilterLensError):
    """A checkpoint file was refused: unsafe, corrupt, too large, or not matching the architecture."""


class WeightsUnavailableError(FilterLensError):
    """Pretrained weights could not be downloaded or found in the local cache."""


class DataError(FilterLensError):
    """An image source could not be read, or holds nothing usable."""


class AnalysisError(FilterLensError):
    """An analysis cannot run on the chosen model/layer (e.g. no depthwise convolution)."""


class ArgumentError(FilterLensError, TypeError, ValueError):
    """A public function was called with an argument it cannot use (a wrong type or a value out of range, hence both
    a ``TypeError`` and a ``ValueError``, as scikit-learn's parameter errors); the message names the argument, the
    value and what is allowed."""


class MissingExtraError(FilterLensError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the extra that installs it."""


class InstallError(FilterLensError, ImportError):
    """The installed packages do not work together (torch and torchvision of different releases or builds); the
    message says what to install, and ``filterlens env`` checks the install."""


def value_text(value: object) -> str:
    """A value as an error message shows it: ``float 2.5``, ``str '8'`` (cut at 80 characters), or its type."""
    if isinstance(value, str | int | float):
        return f"{type(value).__name__} {value!r}"[:80]
    return type(value).__name__
