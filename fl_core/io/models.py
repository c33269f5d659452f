"""Model spec strings -> loaded models (or weights-only state dicts) with their input preprocessing.

Spec forms (README.md, "Models"):

=================================  ==============================================================================
``timm:NAME`` / ``torchvision:NAME``  registry architecture, random init from seed 0 (the same network in every
                                    process; labelled "random init" everywhere)
``timm:NAME@pretrained``            registry weights (hub download or local cache; clear error when unreachable)
``timm:NAME=PATH``                  architecture + a state-dict file
``cifar:resnet56[=PATH]``           a CIFAR ResNet of He et al. 2016 (:mod:`fl_core.io.cifar`): random init, or a
                                    checkpoint in any of the common layouts, with its family's 32-pixel input
``weights:PATH``                    weights only: any state dict, no architecture needed
``onnx:PATH``                       weights only: the Conv nodes of an ONNX model (:mod:`fl_core.io.onnx_weights`)
``demo:NAME``                       a checkpoint shipped in ``fl_core/assets/demo`` (listed in its manifest)
=================================  ==============================================================================

Parsed and checked in :mod:`fl_core.io.specs`; registry architectures built in :mod:`fl_core.io.registries`; the
demos listed in :mod:`fl_core.io.demos`.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from fl_core.errors import CheckpointError, ModelSpecError
from fl_core.io import DEMO_DIR, cifar, nets
from fl_core.io.checkpoints import file_sha256, load_into, load_state_dict, match_state_dict
from fl_core.io.classes import IMAGENET_CLASSES, imagenet_class_names
from fl_core.io.demos import DEMO_INPUT_SOURCE, demo_manifest
from fl_core.io.layers import ConvLayer, probe_inventory
from fl_core.io.paths import check_readable
from fl_core.io.preprocessing import OVERRIDE_FIELDS, InputConfig
from fl_core.io.registries import build_timm, build_torchvision, build_within_budget, registry_model
from fl_core.io.specs import SOURCES, ModelSpec, is_random_init_spec

DEFAULT_INPUT_SOURCE = "FilterLens's default for files that do not record theirs (ImageNet evaluation)"


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A model ready for analysis. Shared read-only between sessions: never mutate ``model`` or ``state_dict``, and
    never register a hook on ``model`` (hooks fire in every thread's forward pass): use :meth:`forward_copy`.

    Attributes:
        spec: the canonical spec string.
        label: short display name ("resnet18 (random init)").
        model: the ``nn.Module`` in eval mode, or ``None`` for weights-only specs.
        state_dict: the weights (for full models, ``model.state_dict()`` tensors, shared storage).
        input_config: preprocessing (editable for uploads).
        random_init: True when no trained weights were loaded.
        sha256: content hash of the weight file, if any (cache key).
        notes: plain-language notes from loading.
        init_spec: spec of the matching initialization checkpoint (demo models), for init subtraction.
        class_names: names of the output classes when known.
        declared_layers: the convolutions as a weights-only file declares them (ONNX Conv nodes: real groups,
            strides, pads and the conv that sees the image), used instead of reading kinds off weight shapes.
        conv_layers: every convolution in forward order (:func:`fl_core.io.layers.probe_inventory`, or
            ``declared_layers``), taken once on construction, before the object is shared.
        input_source: where :attr:`input_config` came from, in words (the registry's config, the checkpoint family,
            a demo's manifest, FilterLens's default for files that do not record it).
        input_changed: the preprocessing fields the user set (``load_model``'s ``input_overrides``).
    """

    spec: str
    label: str
    model: nn.Module | None
    state_dict: Mapping[str, torch.Tensor]
    input_config: InputConfig
    random_init: bool = False
    sha256: str | None = None
    notes: tuple[str, ...] = ()
    init_spec: str | None = None
    class_names: tuple[str, ...] | None = None
    declared_layers: tuple[ConvLayer, ...] = field(default=(), repr=False)
    input_source: str = DEFAULT_INPUT_SOURCE
    input_changed: tuple[str, ...] = ()
    conv_layers: tuple[ConvLayer, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        layers, notes = ((self.declared_layers, ()) if self.model is None and self.declared_layers else
                         probe_inventory(self.model, self.state_dict, self.input_config.input_size))
        object.__setattr__(self, "conv_layers", layers)
        object.__setattr__(self, "notes", tuple(dict.fromkeys((*self.notes, *notes))))

    @classmethod
    def from_module(cls, module: nn.Module, input_config: InputConfig | None = None, *, name: str | None = None,
                    class_names: tuple[str, ...] | None = None) -> LoadedModel:
        """Analyse any PyTorch network: a private copy of ``module`` in eval mode (the module itself is never
        changed), with the preprocessing it expects.

        Args:
            module: the network (any ``nn.Module`` with convolutions).
            input_config: its input preprocessing (default: 224 px ImageNet evaluation, :class:`InputConfig`).
            name: how results name it (spec ``module:NAME``; default: the class name).
            class_names: names of its output classes, when known (accuracy on labelled trees maps by them).
        """
        if not isinstance(module, nn.Module):
            raise ModelSpecError(f"from_module takes a torch.nn.Module, not {type(module).__name__}.")
        if input_config is not None and not isinstance(input_config, InputConfig):
            raise ModelSpecError(f"input_config must be an InputConfig, not {type(input_config).__name__}.")
        model = copy.deepcopy(module).eval().requires_grad_(False)
        name = name or type(module).__name__
        return cls(spec=f"module:{name}", label=f"{name} (nn.Module)", model=model, state_dict=model.state_dict(),
                   input_config=input_config or InputConfig(), class_names=class_names,
                   input_source="the input_config given with the module" if input_config else
                   "FilterLens's default (ImageNet evaluation)")

    @property
    def weights_only(self) -> bool:
        return self.model is None

    @property
    def user_file(self) -> bool:
        """Whether the weights come from a file the user named (``…=PATH``, ``weights:``, ``onnx:``), whose
        preprocessing is theirs to set."""
        return self.spec.partition(":")[0] in SOURCES and ModelSpec.parse(self.spec).path is not None

    @property
    def init_is_own(self) -> bool:
        """Whether :attr:`init_spec` is this network's own initialization (a demo that recorded it), rather than a
        random init of the same architecture (a published network whose initialization was not published)."""
        return bool(self.init_spec) and self.init_spec.startswith("demo:")

    @property
    def num_classes(self) -> int | None:
        return len(self.class_names) if self.class_names else _count_outputs(self.model)

    def copy_model(self) -> nn.Module:
        """A private deep copy of the network, safe to change (swaps, lesions, training)."""
        return copy.deepcopy(self._require_model())

    def forward_copy(self, device: torch.device) -> nn.Module:
        """A private network for read-only forward passes with hooks (the shared one is never hooked).

        On the model's own device: new module objects that share the parameter and buffer tensors (no copy of the
        weights; hooks and flags set on it stay private). Elsewhere: a deep copy moved to ``device``. Never train it
        or move it with ``.to()`` (that would reach the shared tensors).
        """
        model = self._require_model()
        tensors = [*model.parameters(), *model.buffers()]
        if not tensors or tensors[0].device == device:
            return copy.deepcopy(model, memo={id(t): t for t in tensors})
        return copy.deepcopy(model).to(device)

    def _require_model(self) -> nn.Module:
        if self.model is None:
            raise ModelSpecError(f"{self.label} is weights-only, and this analysis runs the network. "
                                 f"{self.runnable_advice()}")
        return self.model

    def runnable_advice(self) -> str:
        """How to get a network FilterLens can run from this weights-only model, naming a route that exists: for an
        ONNX file, that its graph cannot run here; for a CIFAR ResNet's state dict, its ``cifar:`` spec (depth from the
        keys); otherwise the registries' ``NAME=PATH`` specs and, for a network of one's own code, ``from_module``."""
        if self.spec.startswith("onnx:"):
            return ("FilterLens reads ONNX files for their weights only and cannot run ONNX graphs: load the "
                    "network's PyTorch weights with its architecture instead (timm:NAME=PATH, torchvision:NAME=PATH or "
                    "cifar:resnetNN=PATH).")
        if layout := cifar.read_cifar_layout(self.state_dict):
            return (f"Its weights are a CIFAR {layout.name} ({layout.blocks} blocks in each of layer1-layer3 after a "
                    f"16×3×3×3 conv1): load it as cifar:{layout.name}=PATH.")
        return ("Name the architecture it was trained as: timm:NAME=PATH or torchvision:NAME=PATH (CIFAR ResNets: "
                "cifar:resnetNN=PATH). A network defined in your own code runs from Python: "
                "fl_core.LoadedModel.from_module(model).")

    def describe(self) -> dict[str, object]:
        """JSON-safe summary for ``inspect`` and the Home page."""
        n_params = sum(int(t.numel()) for k, t in self.state_dict.items()
                       if t.is_floating_point() and not k.endswith(("running_mean", "running_var")))
        return {"spec": self.spec, "label": self.label, "weights_only": self.weights_only,
                "random_init": self.random_init, "parameters": n_params, "num_classes": self.num_classes,
                "input_config": self.input_config.to_dict(), "preprocessing": self.preprocessing_text(),
                "sha256": self.sha256, "notes": list(self.notes), "init_spec": self.init_spec}

    def preprocessing_text(self) -> str:
        """The preprocessing in words and where it came from: ``32 px, no crop, …, from the checkpoint family …;
        mean, std set by you``."""
        changed = f"; {', '.join(f.replace('_', ' ') for f in self.input_changed)} set by you" \
            if self.input_changed else ""
        return f"{self.input_config.describe()}, from {self.input_source}{changed}"


WEIGHTS_ONLY_USES = ("Energy Profiles, Whitening, Master Keys, Scale-Space Models and the Report read its weights; "
                     "Channel Axes and Swap & Re-score run the network")
"""What a weights-only model is good for, in the dashboard's words."""


def recognised_spec(loaded: LoadedModel) -> tuple[str, str]:
    """The spec a checkpoint loaded without an architecture runs as, recognised from its keys, and why, in a
    sentence for the user: a CIFAR ResNet (:func:`fl_core.io.cifar.read_cifar_layout`, depth from the keys) becomes
    ``cifar:resnetN=PATH`` with its checkpoint family's preprocessing; anything else stays weights only, and the
    sentence says what runs on its weights and how to name its architecture (:meth:`LoadedModel.runnable_advice`)."""
    parsed = ModelSpec.parse(loaded.spec)
    if parsed.source == "weights" and (layout := cifar.read_cifar_layout(loaded.state_dict)):
        spec = f"cifar:{layout.name}={parsed.path}"
        config = cifar.cifar_input_config(layout.family)
        return spec, (f"{parsed.name} holds a CIFAR {layout.name}: its keys have {layout.blocks} blocks in each of "
                      f"layer1-layer3 after a 16×3×3×3 conv1 and {layout.num_classes} classes. Added as "
                      f"cifar:{layout.name}, seeing {config.describe()} ({layout.family.description}).")
    return loaded.spec, f"{parsed.name} is added as weights only: {WEIGHTS_ONLY_USES}. {loaded.runnable_advice()}"


def _count_outputs(model: nn.Module | None) -> int | None:
    if model is None:
        return None
    last = [m for m in model.modules() if isinstance(m, nn.Linear | nn.Conv2d)]
    return None if not last else (last[-1].out_features if isinstance(last[-1], nn.Linear) else last[-1].out_channels)


def _imagenet_names(model: nn.Module) -> tuple[str, ...] | None:
    """ImageNet-1k class names for pretrained 1000-class registry models."""
    return imagenet_class_names() if _count_outputs(model) == IMAGENET_CLASSES else None


def load_model(spec: str, *, input_overrides: Mapping[str, object] | None = None, prefer_ema: bool = False
               ) -> LoadedModel:
    """Resolve a spec string into a :class:`LoadedModel` (eval mode, CPU, ``requires_grad`` off).

    Args:
        spec: a model spec string (module docstring).
        input_overrides: ``input_size``, ``crop_pct``, ``interpolation``, ``mean``, ``std``, ``crop_mode`` overrides
            (they win over the registry's own config).
        prefer_ema: take EMA weights from checkpoints that hold both.

    Raises:
        ModelSpecError, CheckpointError, WeightsUnavailableError: with a message for the user.
        DataError: the spec's file is outside the folders users may read (:mod:`fl_core.io.paths`).
    """
    parsed = ModelSpec.parse(spec)
    if parsed.path:
        check_readable(parsed.path)
    loader = {"timm": _load_registry, "torchvision": _load_registry, "cifar": _load_cifar,
              "weights": _load_weights_only, "onnx": _load_onnx, "demo": _load_demo}[parsed.source]
    loaded = loader(parsed, prefer_ema)
    if input_overrides:
        config = loaded.input_config.with_overrides(**input_overrides)
        loaded = dataclasses.replace(loaded, input_config=config, input_changed=tuple(
            name for name in OVERRIDE_FIELDS if getattr(config, name) != getattr(loaded.input_config, name)))
    if loaded.model is not None:
        loaded.model.eval().requires_grad_(False)
    return loaded


def _load_weights_only(spec: ModelSpec, prefer_ema: bool) -> LoadedModel:
    sd = load_state_dict(spec.path, prefer_ema=prefer_ema)
    if not any(t.dim() == 4 for t in sd.tensors.values()):
        raise CheckpointError(f"{spec.name} has no 4-D (convolution) weights, so there are no filters to analyse.")
    return LoadedModel(spec=str(spec), label=f"{spec.name} (weights only)", model=None, state_dict=sd.tensors,
                       input_config=InputConfig(), sha256=sd.sha256, notes=sd.notes)


def _load_onnx(spec: ModelSpec, prefer_ema: bool) -> LoadedModel:
    from fl_core.io.onnx_weights import read_onnx_convs

    convs = read_onnx_convs(spec.path)
    return LoadedModel(spec=str(spec), label=f"{spec.name} (ONNX, weights only)", model=None,
                       state_dict=convs.tensors, input_config=InputConfig(), sha256=convs.sha256, notes=convs.notes,
                       declared_layers=convs.layers)


RANDOM_INIT_SEED = 0  # registry architectures without weights: one reproducible network, not a new one per process
_INIT_SEED: contextvars.ContextVar[int] = contextvars.ContextVar("random_init_seed", default=RANDOM_INIT_SEED)


@contextlib.contextmanager
def _random_init_seed() -> Iterator[None]:
    """Build a network's random init from :data:`RANDOM_INIT_SEED` (or :func:`load_random_init`'s seed), leaving the
    caller's random state as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_INIT_SEED.get())
        yield


def load_random_init(spec: str, seed: int) -> LoadedModel:
    """The random init of a registry architecture drawn from ``seed`` (:func:`load_model` draws it from
    :data:`RANDOM_INIT_SEED`); its label names the seed.

    Raises:
        ModelSpecError: ``spec`` has weights (a file or ``@pretrained``): there is no seed to draw.
    """
    if not is_random_init_spec(spec):
        raise ModelSpecError(f"{spec} is not a random initialization of a registry architecture (it has weights), so "
                             "it cannot be drawn from another seed: give torchvision:NAME, timm:NAME or cifar:NAME.")
    if seed == RANDOM_INIT_SEED:
        return load_model(spec)
    token = _INIT_SEED.set(seed)
    try:
        loaded = load_model(spec)
    finally:
        _INIT_SEED.reset(token)
    return dataclasses.replace(loaded, label=loaded.label.replace("random init", f"random init, seed {seed}"))


def _load_registry(spec: ModelSpec, prefer_ema: bool) -> LoadedModel:
    build = build_timm if spec.source == "timm" else build_torchvision
    if spec.path is None:
        with _random_init_seed():
            model, config = build(spec.name, spec.pretrained, None)
        tag = "pretrained" if spec.pretrained else "random init"
        return LoadedModel(spec=str(spec), label=f"{spec.name} ({tag})", model=model, state_dict=model.state_dict(),
                           input_config=config, random_init=not spec.pretrained,
                           class_names=_imagenet_names(model) if spec.pretrained else None,
                           input_source=_registry_input_source(spec))
    sd = load_state_dict(spec.path, prefer_ema=prefer_ema)
    model, config = build(spec.name, False, _infer_num_classes(build, spec.name, sd.tensors))
    load_into(model, sd.tensors, f"{spec.source}:{spec.name}")
    return LoadedModel(spec=str(spec), label=f"{spec.name} ({Path(spec.path).name})", model=model,
                       state_dict=model.state_dict(), input_config=config, sha256=sd.sha256, notes=sd.notes,
                       input_source=_registry_input_source(spec))


def _registry_input_source(spec: ModelSpec) -> str:
    """Where a registry model's preprocessing comes from: the config of the registry's own weights (a file's too)."""
    return (f"timm's config of {spec.name}'s pretrained weights" if spec.source == "timm" else
            f"torchvision's evaluation transform of {spec.name}'s default weights")


def _load_cifar(spec: ModelSpec, prefer_ema: bool) -> LoadedModel:
    """``cifar:NAME`` at random init (seeded), or ``cifar:NAME=PATH`` with its layout mapped (:mod:`fl_core.io.cifar`)
    and its family's preprocessing; CIFAR-10 class names for a trained 10-class head."""
    if spec.pretrained:
        raise ModelSpecError(f"cifar:{spec.name} has no registry weights to download: give the checkpoint file, "
                             f"cifar:{spec.name}=PATH.")
    if spec.path is None:
        with _random_init_seed():
            model = build_within_budget(lambda meta: cifar.cifar_resnet(spec.name), str(spec))
        return LoadedModel(spec=str(spec), label=f"cifar {spec.name} (random init)", model=model,
                           state_dict=model.state_dict(), input_config=cifar.cifar_input_config(), random_init=True,
                           input_source=f"the most common CIFAR ResNet checkpoints, "
                                        f"{cifar.RANDOM_INIT_FAMILY.description}")
    sd = load_state_dict(spec.path, prefer_ema=prefer_ema)
    layout = cifar.cifar_checkpoint(spec.name, sd.tensors, Path(spec.path).name)
    model = build_within_budget(lambda meta: cifar.cifar_resnet(spec.name, layout.num_classes, layout.shortcut),
                                str(spec))
    load_into(model, layout.tensors, f"cifar:{spec.name}")
    return LoadedModel(spec=str(spec), label=f"cifar {spec.name} ({Path(spec.path).name})", model=model,
                       state_dict=model.state_dict(), input_config=cifar.cifar_input_config(layout.family),
                       sha256=sd.sha256, notes=(*sd.notes, *layout.notes),
                       input_source=f"its checkpoint family, {layout.family.description}",
                       class_names=cifar.CIFAR10_CLASSES if layout.num_classes == len(cifar.CIFAR10_CLASSES) else None)


def _infer_num_classes(build, name: str, tensors: Mapping[str, torch.Tensor]) -> int | None:
    """The classifier width of the file when it differs from the registry default (a fine-tuned head)."""
    model, _ = build(name, False, None)
    match = match_state_dict(model, tensors)
    if not match.shape_conflicts:
        return None
    head = _classifier_keys(model)
    conflicts = {name for name, _, _ in match.shape_conflicts}
    if conflicts and conflicts <= head:
        weight = next(k for k in sorted(head) if k.endswith("weight") and k in tensors)
        return int(tensors[weight].shape[0])
    return None


def _classifier_keys(model: nn.Module) -> set[str]:
    """State-dict keys of the final classifier layer."""
    heads = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Conv2d)]
    name = heads[-1][0]
    return {f"{name}.{k}" for k in heads[-1][1].state_dict()}


def _load_demo(spec: ModelSpec, prefer_ema: bool) -> LoadedModel:
    entries = demo_manifest()
    if spec.name not in entries:
        raise ModelSpecError(f"No demo model '{spec.name}'. Shipped demos: {', '.join(entries) or 'none'}"
                             " (run scripts/make_demo_checkpoints.py to build them).")
    entry = entries[spec.name]
    path = DEMO_DIR / entry.file
    sd = load_state_dict(path, prefer_ema=prefer_ema)
    if entry.arch is None:
        return LoadedModel(spec=str(spec), label=spec.name, model=None, state_dict=sd.tensors,
                           input_config=InputConfig(**entry.input_config), sha256=sd.sha256, notes=sd.notes,
                           input_source=DEMO_INPUT_SOURCE)
    model = registry_model(entry.arch)[0] if ":" in entry.arch else nets.build_net(entry.arch, **entry.arch_kwargs)
    load_into(model, sd.tensors, f"demo:{spec.name}")
    return LoadedModel(spec=str(spec), label=spec.name, model=model, state_dict=model.state_dict(),
                       input_config=InputConfig(**entry.input_config),
                       random_init=entry.provenance.get("trained_steps", 1) == 0, sha256=file_sha256(path),
                       notes=sd.notes, init_spec=entry.init_spec,
                       class_names=entry.class_names or _imagenet_names(model), input_source=DEMO_INPUT_SOURCE)


