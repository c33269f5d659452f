"""Safe reading of untrusted checkpoint files into a plain ``{name: tensor}`` state dict.

Rules (README.md, "Models": checkpoints are untrusted):

* ``torch.load(..., weights_only=True)`` always; a file whose unpickling would build arbitrary Python objects is
  refused and nothing from it runs. There is no fallback to full unpickling.
* safetensors is read with its own parser (no pickle at all).
* every input is bounded before it costs: the file size; the containers (:mod:`fl_core.io.archives`: the pickled
  part, since PyTorch's weights-only unpickler runs in Python; the number of zip records and of safetensors header
  entries; zip records stored uncompressed and within the file); each tensor's shape, and the values all tensors
  claim together.
* loading holds about one copy of the file in memory: safetensors are read with ``pread`` (no mapping that would
  tie the tensors to the file), torch files record by record; validation makes no temporary as large as a tensor.
* NaN/inf, float64 values beyond float32's range, integer weights and absurd shapes are refused.
* nested ``state_dict``/``model``/``model_ema`` containers (up to :data:`MAX_NESTING_DEPTH` levels) and
  ``module.``/``_orig_mod.`` prefixes are unwrapped.
* every failure is a :class:`~fl_core.errors.CheckpointError` whose one-line message says what to do.
"""

from __future__ import annotations

import collections
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from fl_core.compute.budgets import max_checkpoint_mb
from fl_core.errors import CheckpointError
from fl_core.io.archives import check_tensor_count, read_checkpoint_file

CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".pth", ".th", ".bin")
ONNX_SUFFIX = ".onnx"
"""ONNX models: protobuf, read by :mod:`fl_core.io.onnx_weights` (the ``onnx:PATH`` spec), not by this module."""
NESTED_KEYS = ("state_dict", "model", "model_ema", "state_dict_ema", "ema", "net", "module")
STRIPPED_PREFIXES = ("module.", "_orig_mod.")
MAX_TENSOR_ELEMENTS = 2_000_000_000
MAX_TENSOR_DIMS = 8
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
MAX_CLAIMED_TO_STORED = 4
"""All tensors together may claim at most this many times the bytes the file stores (views of shared storage, such
as tied weights, claim the same bytes twice): the total element count is bounded by what was uploaded."""
MAX_NESTING_DEPTH = 16
"""Levels of nested ``state_dict``/``model``/... containers unwrapped."""
def max_checkpoint_bytes() -> int:
    """The size cap for one checkpoint file: ``FL_MAX_CHECKPOINT_MB``
    (:func:`fl_core.compute.budgets.max_checkpoint_mb`, default 1024 MiB, the upload limit's default too)."""
    return int(max_checkpoint_mb() * 2**20)


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
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file: give one of its files. A folder of one "
                              "run's checkpoints is read by report (weights:DIR) and channels (ARCH=DIR, e.g. "
                              "cifar:resnet20=DIR).")
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
    raw = read_checkpoint_file(path)
    tensors, notes = unwrap_state_dict(raw, prefer_ema=prefer_ema, name=path.name)
    validate_tensors(tensors, name=path.name, stored_bytes=size)
    return LoadedStateDict(tensors=tensors, path=str(path), sha256=file_sha256(path), notes=tuple(notes))


def unwrap_state_dict(obj: object, *, prefer_ema: bool = False, name: str = "checkpoint"
                      ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Find the tensors in a loaded checkpoint: descend into nested containers, strip wrapper prefixes.

    While a nested ``state_dict``/``model``/... entry leads to tensors within :data:`MAX_NESTING_DEPTH` levels, the
    first such entry (EMA ones first with ``prefer_ema``) is taken. Non-tensor entries (epoch counters, best accuracy,
    optimizer states of other types) are dropped with a note.
    """
    notes: list[str] = []
    keys = NESTED_KEYS if not prefer_ema else ("model_ema", "state_dict_ema", "ema", *NESTED_KEYS)
    reach: dict[tuple[int, int], bool] = {}
    for depth in range(MAX_NESTING_DEPTH):
        if not isinstance(obj, Mapping):
            break
        remaining = MAX_NESTING_DEPTH - depth - 1
        nested = next((k for k in keys if _reaches_tensors(obj.get(k), keys, remaining, reach)), None)
        if nested is None:
            break
        notes.append(f"used the nested '{nested}' entry")
        obj = obj[nested]
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{name} holds a {type(obj).__name__}, not a state dict. Save "
                              "model.state_dict(), not the model object.")
    check_tensor_count(len(obj), name, "entries")
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    dropped = [str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if dropped:
        notes.append(f"ignored {len(dropped)} non-tensor entr{'y' if len(dropped) == 1 else 'ies'} "
                     f"({_preview(tuple(dropped))})")
    if not tensors:
        raise CheckpointError(_no_tensors_message(obj, keys, name))
    for prefix in STRIPPED_PREFIXES:
        if all(k.startswith(prefix) for k in tensors):
            tensors = {k[len(prefix):]: v for k, v in tensors.items()}
            notes.append(f"stripped the '{prefix}' prefix")
    return tensors, notes


def _has_tensors(obj: Mapping) -> bool:
    return any(isinstance(v, torch.Tensor) for v in obj.values())


def _reaches_tensors(obj: object, keys: tuple[str, ...], depth: int, memo: dict[tuple[int, int], bool]) -> bool:
    """Whether ``obj`` is a mapping with tensors, or leads to one through ``keys`` within ``depth`` more levels.
    Memoized per (container, depth), so shared or self-containing containers cost one visit each."""
    if not isinstance(obj, Mapping):
        return False
    slot = (id(obj), depth)
    if slot not in memo:
        memo[slot] = False  # a container that contains itself reaches nothing through itself
        memo[slot] = _has_tensors(obj) or (depth > 0 and any(_reaches_tensors(obj.get(k), keys, depth - 1, memo)
                                                              for k in keys))
    return memo[slot]


def _no_tensors_message(obj: Mapping, keys: tuple[str, ...], name: str) -> str:
    """Why no tensors were found, in the words a user can act on: containers nested deeper than FilterLens unwraps,
    tensors under an entry it does not unwrap, or none at all."""
    chain = _nesting_chain(obj, keys)
    if len(chain) > MAX_NESTING_DEPTH:
        shown = " → ".join(f"'{k}'" for k in chain[:4])
        return (f"{name} nests its containers more than {MAX_NESTING_DEPTH} levels deep ({shown} → …) and holds no "
                f"tensors within the {MAX_NESTING_DEPTH} levels FilterLens unwraps. Save the state dict itself: "
                "torch.save(model.state_dict(), 'weights.pt').")
    found = _path_to_tensors(obj)
    if found:
        where = "".join(f"[{k!r}]" for k in found)
        return (f"{name} holds its tensors under {where} ({len(found)} level{'s' if len(found) > 1 else ''} down), "
                f"an entry FilterLens does not unwrap (it unwraps {', '.join(NESTED_KEYS)}). Save that entry itself: "
                f"torch.save(checkpoint{where}, 'weights.pt').")
    return f"{name} contains no tensors. Save model.state_dict() (a dict of tensors)."


def _nesting_chain(obj: Mapping, keys: tuple[str, ...]) -> list[str]:
    """The keys followed from ``obj`` through nested containers (first of ``keys`` holding a mapping), stopping one
    level past :data:`MAX_NESTING_DEPTH` or at a container seen before."""
    chain: list[str] = []
    seen = {id(obj)}
    while len(chain) <= MAX_NESTING_DEPTH:
        key = next((k for k in keys if isinstance(obj.get(k), Mapping)), None)
        if key is None or id(obj[key]) in seen:
            break
        obj = obj[key]
        seen.add(id(obj))
        chain.append(key)
    return chain


def _path_to_tensors(obj: Mapping, max_visits: int = 10_000) -> list[str]:
    """Keys to the shallowest mapping with tensors under any key (breadth first, each container once, at most
    :data:`MAX_NESTING_DEPTH` levels and ``max_visits`` containers); empty when there is none."""
    queue = collections.deque([(obj, [])])
    seen = {id(obj)}
    while queue and len(seen) <= max_visits:
        node, path = queue.popleft()
        if path and _has_tensors(node):
            return path
        if len(path) < MAX_NESTING_DEPTH:
            for key, value in node.items():
                if isinstance(value, Mapping) and id(value) not in seen:
                    seen.add(id(value))
                    queue.append((value, [*path, str(key)]))
    return []


def validate_tensors(tensors: Mapping[str, torch.Tensor], *, name: str = "checkpoint",
                     stored_bytes: int | None = None) -> None:
    """Refuse tensors FilterLens cannot analyse: more than :data:`~fl_core.io.archives.MAX_TENSORS`, sparse/meta
    storage, absurd shapes, views that claim more values than the file stores (one tensor claiming more than its
    storage, or all of them together more than :data:`MAX_CLAIMED_TO_STORED` × ``stored_bytes``), NaN/inf, float64
    values beyond float32's range (they become infinite in analyses), float8, integer (quantized) weights.

    Values are checked with one min/max reduction per tensor (NaN propagates through it), with no temporary as large
    as the tensor.
    """
    check_tensor_count(len(tensors), name)
    claimed = 0
    for key, tensor in tensors.items():
        _validate_storage(key, tensor, name)
        claimed += tensor.numel() * tensor.element_size()
        if tensor.is_floating_point():
            _validate_float_values(key, tensor, name)
        elif tensor.is_complex():
            raise CheckpointError(f"{name}: tensor '{key}' is complex-valued; refused. Save real-valued weights.")
        elif (key.endswith("weight") and tensor.dim() >= 2) or tensor.dim() == 4:
            raise CheckpointError(f"{name}: '{key}' holds {tensor.dtype} values, not floating-point weights "
                                  "(a quantized checkpoint?). Dequantize it to float32 first.")
    if stored_bytes is not None and claimed > MAX_CLAIMED_TO_STORED * stored_bytes:
        raise CheckpointError(f"{name}: its tensors claim {claimed / 2**20:,.0f} MiB of values, over "
                              f"{MAX_CLAIMED_TO_STORED}× the {stored_bytes / 2**20:,.1f} MiB the file stores (many "
                              "views of the same storage); refused. Save each weight once (model.state_dict()).")


def _validate_storage(key: str, tensor: torch.Tensor, name: str) -> None:
    if tensor.is_nested:
        raise CheckpointError(f"{name}: tensor '{key}' is a nested tensor (a list of tensors of different shapes), "
                              "not a weight; refused. Save the model's state_dict().")
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


def _validate_float_values(key: str, tensor: torch.Tensor, name: str) -> None:
    if tensor.dtype not in FLOAT_DTYPES:
        raise CheckpointError(f"{name}: tensor '{key}' holds {tensor.dtype} values; FilterLens reads float16, "
                              "bfloat16, float32 and float64. Convert the weights to float32 first.")
    low, high = (float(v) for v in torch.aminmax(tensor))
    if not (math.isfinite(low) and math.isfinite(high)):
        raise CheckpointError(f"{name}: tensor '{key}' contains NaN or infinite values. The training run "
                              "that saved it diverged; use an earlier checkpoint.")
    if max(-low, high) > FLOAT32_MAX:
        raise CheckpointError(f"{name}: tensor '{key}' holds float64 values up to {max(-low, high):.3g}, beyond "
                              f"float32's range (±{FLOAT32_MAX:.3g}), where FilterLens analyses them: they would "
                              "become infinite. Rescale the weights, or check that the file holds trained weights.")


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

