"""Safe reading of untrusted checkpoint files into a plain ``{name: tensor}`` state dict.

Rules (DESIGN.md, "Safe loading"):

* ``torch.load(..., weights_only=True)`` always; a file whose unpickling would build arbitrary Python objects is
  refused and nothing from it runs. There is no fallback to full unpickling.
* safetensors is read with its own parser (no pickle at all).
* size caps on the file and on each tensor; NaN/inf, integer weights and absurd shapes are refused.
* nested ``state_dict``/``model``/``model_ema`` containers and ``module.``/``_orig_mod.`` prefixes are unwrapped.
* every failure is a :class:`~fl_core.errors.CheckpointError` whose message says what to do.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from fl_core.errors import CheckpointError

CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".pth", ".th", ".bin")
NESTED_KEYS = ("state_dict", "model", "model_ema", "state_dict_ema", "ema", "net", "module")
STRIPPED_PREFIXES = ("module.", "_orig_mod.")
MAX_TENSOR_ELEMENTS = 2_000_000_000
MAX_TENSOR_DIMS = 8
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def max_checkpoint_bytes() -> int:
    """The size cap for one checkpoint file: ``FL_MAX_CHECKPOINT_MB`` (default 1024 MiB, the upload limit)."""
    return int(float(os.environ.get("FL_MAX_CHECKPOINT_MB", "1024")) * 2**20)


@dataclass(frozen=True)
class LoadedStateDict:
    """A validated state dict and what was done to get it.

    Attributes:
        tensors: parameter/buffer name -> tensor (CPU).
        path: the file it came from.
        sha256: content hash of the file (the cache key of everything derived from it).
        notes: plain-language notes on unwrapping ("used the nested 'state_dict' entry", ...).
    """

    tensors: dict[str, torch.Tensor]
    path: str
    sha256: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StateDictMatch:
    """How a state dict fits a model: names the model lacks, extra names, and shape conflicts."""

    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    shape_conflicts: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.shape_conflicts)

    def explain(self, target: str) -> str:
        """A plain-language account of the mismatch, e.g. for ``st.error``."""
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} weight(s) the model needs are not in the file "
                         f"({_preview(self.missing)})")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} weight(s) in the file are unknown to the model "
                         f"({_preview(self.unexpected)})")
        if self.shape_conflicts:
            shown = "; ".join(f"{name}: file {_shape(a)}, model {_shape(b)}"
                              for name, a, b in self.shape_conflicts[:3])
            parts.append(f"{len(self.shape_conflicts)} weight(s) have a different shape ({shown})")
        return (f"The file does not fit {target}: " + "; ".join(parts) + ". Check that the architecture name is the "
                "one the file was trained with; for a file of unknown architecture use the spec weights:PATH, which "
                "needs no architecture.")


def _preview(names: tuple[str, ...], n: int = 3) -> str:
    shown = ", ".join(names[:n])
    return shown + (f", … {len(names) - n} more" if len(names) > n else "")


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(str(s) for s in shape) or "scalar"


def file_sha256(path: str | Path, chunk_bytes: int = 2**22) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def load_state_dict(path: str | Path, *, prefer_ema: bool = False, max_bytes: int | None = None) -> LoadedStateDict:
    """Read a checkpoint safely and return its validated, unwrapped state dict.

    Args:
        path: a ``.safetensors``, ``.pt``, ``.pth``, ``.th`` or ``.bin`` file.
        prefer_ema: take ``model_ema``/``state_dict_ema`` over the raw weights when both are present.
        max_bytes: size cap (default :func:`max_checkpoint_bytes`).

    Raises:
        CheckpointError: with a message saying what is wrong and what to do.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"No checkpoint file at {path}. Check the path (it is read on the machine that runs "
                              "FilterLens).")
    if path.suffix.lower() not in CHECKPOINT_SUFFIXES:
        raise CheckpointError(f"{path.name}: unsupported file type '{path.suffix}'. FilterLens reads "
                              f"{', '.join(CHECKPOINT_SUFFIXES)} state dicts.")
    size = path.stat().st_size
    cap = max_checkpoint_bytes() if max_bytes is None else max_bytes
    if size == 0:
        raise CheckpointError(f"{path.name} is empty (0 bytes). Upload the file again.")
    if size > cap:
        raise CheckpointError(f"{path.name} is {size / 2**20:.0f} MiB, over the {cap / 2**20:.0f} MiB limit "
                              "(FL_MAX_CHECKPOINT_MB). Save only the state dict, or ask the admin to raise the limit.")
    raw = _read_safetensors(path) if _is_safetensors(path) else _read_torch_file(path, cap)
    tensors, notes = unwrap_state_dict(raw, prefer_ema=prefer_ema, name=path.name)
    validate_tensors(tensors, name=path.name)
    return LoadedStateDict(tensors=tensors, path=str(path), sha256=file_sha256(path), notes=tuple(notes))


def _is_safetensors(path: Path) -> bool:
    """Sniff the content, not the suffix: an 8-byte little-endian header length followed by ``{``."""
    with open(path, "rb") as handle:
        head = handle.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        if path.suffix.lower() == ".safetensors":
            raise CheckpointError(f"{path.name} is not a valid safetensors file (its header is missing or corrupt). "
                                  "Re-save it with safetensors.torch.save_file.")
        return False
    (header_len,) = struct.unpack("<Q", head[:8])
    if header_len > path.stat().st_size - 8:
        raise CheckpointError(f"{path.name}: the safetensors header claims {header_len} bytes, more than the file "
                              "holds; the file is truncated or corrupt. Upload it again.")
    return True


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, ValueError, OSError, RuntimeError) as err:
        raise CheckpointError(f"{path.name}: corrupt safetensors file ({err}). Upload it again or re-save it.") from err


def _read_torch_file(path: Path, cap: int) -> object:
    if zipfile.is_zipfile(path):
        _check_zip_archive(path, cap)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=False)
    except pickle.UnpicklingError as err:
        if "unsupported global" not in str(err).lower():  # a malformed stream, not a forbidden object
            raise _unreadable(path, err) from err
        raise CheckpointError(
            f"{path.name} was refused: it contains Python objects other than tensors and plain containers, and "
            "loading it would run code from the file. FilterLens never does that. Re-save only the weights: "
            "torch.save(model.state_dict(), 'weights.pt') or safetensors."
        ) from err
    except (EOFError, RuntimeError, ValueError, OSError, struct.error, zipfile.BadZipFile, KeyError,
            AttributeError, IndexError, TypeError, UnicodeDecodeError, MemoryError) as err:
        raise _unreadable(path, err) from err


def _unreadable(path: Path, err: Exception) -> CheckpointError:
    return CheckpointError(f"{path.name} could not be read as a PyTorch checkpoint: the file is damaged, truncated "
                           f"or not a checkpoint ({type(err).__name__}). Upload it again.")


def _check_zip_archive(path: Path, cap: int) -> None:
    """Refuse zip archives that are not PyTorch checkpoints, or whose members are unsafe to open or unpack to more
    than four times the size cap."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            names = [m.filename for m in members]
            if not any(n.endswith("data.pkl") for n in names):
                raise CheckpointError(f"{path.name} is a zip archive but not a PyTorch checkpoint (no data.pkl). "
                                      "Upload the .pt/.pth file itself, not an archive of it.")
            if any(n.startswith("/") or ".." in n.split("/") for n in names):
                raise CheckpointError(f"{path.name}: the archive has member paths outside the archive; refused. "
                                      "Upload the file torch.save wrote, unmodified.")
            unpacked = sum(m.file_size for m in members)
            if unpacked > 4 * cap:
                raise CheckpointError(f"{path.name}: the archive unpacks to {unpacked / 2**20:.0f} MiB, over four "
                                      "times the limit (FL_MAX_CHECKPOINT_MB); refused. Upload the file torch.save "
                                      "wrote.")
            bad = archive.testzip()
            if bad is not None:
                raise CheckpointError(f"{path.name}: archive member {bad} is corrupt. Upload the file again.")
    except zipfile.BadZipFile as err:
        raise CheckpointError(f"{path.name}: damaged zip archive ({err}). Upload the file again.") from err


def unwrap_state_dict(obj: object, *, prefer_ema: bool = False, name: str = "checkpoint"
                      ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Find the tensors in a loaded checkpoint: descend into nested containers, strip wrapper prefixes.

    Non-tensor entries (epoch counters, best accuracy, optimizer states of other types) are dropped with a note.
    """
    notes: list[str] = []
    keys = NESTED_KEYS if not prefer_ema else ("model_ema", "state_dict_ema", "ema", *NESTED_KEYS)
    for _ in range(4):
        if not isinstance(obj, Mapping):
            break
        if _tensor_count(obj) and not any(isinstance(obj.get(k), Mapping) for k in keys):
            break
        nested = next((k for k in keys if isinstance(obj.get(k), Mapping) and _tensor_count(obj[k])), None)
        if nested is None:
            break
        notes.append(f"used the nested '{nested}' entry")
        obj = obj[nested]
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{name} holds a {type(obj).__name__}, not a state dict. Save "
                              "model.state_dict(), not the model object.")
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    dropped = [str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if dropped:
        notes.append(f"ignored {len(dropped)} non-tensor entr{'y' if len(dropped) == 1 else 'ies'} "
                     f"({_preview(tuple(dropped))})")
    if not tensors:
        raise CheckpointError(f"{name} contains no tensors. Save model.state_dict() (a dict of tensors).")
    for prefix in STRIPPED_PREFIXES:
        if all(k.startswith(prefix) for k in tensors):
            tensors = {k[len(prefix):]: v for k, v in tensors.items()}
            notes.append(f"stripped the '{prefix}' prefix")
    return tensors, notes


def _tensor_count(obj: Mapping) -> int:
    return sum(isinstance(v, torch.Tensor) for v in obj.values())


def validate_tensors(tensors: Mapping[str, torch.Tensor], *, name: str = "checkpoint") -> None:
    """Refuse tensors FilterLens cannot analyse: sparse/meta storage, absurd shapes, views that claim more values
    than the file stores (a tiny file unpacking to gigabytes), NaN/inf, float8, integer (quantized) weights."""
    for key, tensor in tensors.items():
        if tensor.is_meta:
            raise CheckpointError(f"{name}: tensor '{key}' holds no values (saved from the 'meta' device); refused. "
                                  "Save the weights of a materialized model.")
        if tensor.layout != torch.strided:
            raise CheckpointError(f"{name}: tensor '{key}' is stored as {str(tensor.layout).removeprefix('torch.')}, "
                                  "not a dense tensor; refused. Save dense weights (tensor.to_dense()).")
        if tensor.dim() > MAX_TENSOR_DIMS or tensor.numel() > MAX_TENSOR_ELEMENTS or 0 in tensor.shape:
            raise CheckpointError(f"{name}: tensor '{key}' has an unusable shape {tuple(tensor.shape)}; refused.")
        if tensor.numel() * tensor.element_size() > tensor.untyped_storage().nbytes():
            raise CheckpointError(f"{name}: tensor '{key}' claims {tensor.numel():,} values but the file stores "
                                  f"only {tensor.untyped_storage().nbytes() // tensor.element_size():,} (a broadcast "
                                  "view); refused. Save contiguous tensors (tensor.contiguous()).")
        if tensor.is_floating_point():
            if tensor.dtype not in FLOAT_DTYPES:
                raise CheckpointError(f"{name}: tensor '{key}' holds {tensor.dtype} values; FilterLens reads float16, "
                                      "bfloat16, float32 and float64. Convert the weights to float32 first.")
            if not bool(torch.isfinite(tensor).all()):
                raise CheckpointError(f"{name}: tensor '{key}' contains NaN or infinite values. The training run "
                                      "that saved it diverged; use an earlier checkpoint.")
        elif tensor.is_complex():
            raise CheckpointError(f"{name}: tensor '{key}' is complex-valued; refused. Save real-valued weights.")
        elif (key.endswith("weight") and tensor.dim() >= 2) or tensor.dim() == 4:
            raise CheckpointError(f"{name}: '{key}' holds {tensor.dtype} values, not floating-point weights "
                                  "(a quantized checkpoint?). Dequantize it to float32 first.")


def match_state_dict(model: nn.Module, tensors: Mapping[str, torch.Tensor]) -> StateDictMatch:
    """Compare a state dict with a model's own, ignoring BatchNorm's ``num_batches_tracked`` counters."""
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    given = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    conflicts = tuple((k, tuple(given[k].shape), tuple(own[k].shape))
                      for k in own if k in given and given[k].shape != own[k].shape)
    return StateDictMatch(missing=tuple(k for k in own if k not in given),
                          unexpected=tuple(k for k in given if k not in own),
                          shape_conflicts=conflicts)


def load_into(model: nn.Module, tensors: Mapping[str, torch.Tensor], target: str) -> None:
    """Load ``tensors`` into ``model`` strictly, or raise a :class:`CheckpointError` that explains the mismatch."""
    match = match_state_dict(model, tensors)
    if not match.ok:
        raise CheckpointError(match.explain(target))
    model.load_state_dict(dict(tensors), strict=False)


def save_state_dict(tensors: Mapping[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None
                    ) -> None:
    """Write a state dict as safetensors (contiguous CPU copies; shared storage is split)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, str(path), metadata=metadata)

