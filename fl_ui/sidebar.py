"""The shared sidebar: model picker (demo, registry, upload), preprocessing of uploads, images, device.

The selection is stored in ``st.session_state["selection"]`` and mirrored into the URL (:mod:`fl_ui.state`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import streamlit as st

from fl_core.compute.device import available_devices
from fl_core.errors import FilterLensError, ModelSpecError
from fl_core.io.checkpoints import CHECKPOINT_SUFFIXES, ONNX_SUFFIX
from fl_core.io.demos import demo_manifest
from fl_core.io.image_archives import MAX_MEMBERS
from fl_core.io.images import BUNDLED, IMAGE_SUFFIXES
from fl_core.io.models import recognised_spec
from fl_core.io.paths import path_policy
from fl_core.io.preprocessing import CROP_MODES, INTERPOLATIONS, MAX_RESIZE_SIZE, parse_rgb, rgb_text
from fl_core.io.sources import is_bundled, source_path
from fl_core.io.specs import FILE_SOURCES, ModelSpec
from fl_ui.cache import get_images, get_model
from fl_ui.memory import release_upload
from fl_ui.messages import show
from fl_ui.paths import users_paths
from fl_ui.state import Selection, selection_from_url, write_selection_to_url
from fl_ui.uploads import upload_store

REGISTRIES = ("timm", "torchvision", "cifar")
PRETRAINED_TAG = "@pretrained"
PICKER_STYLE = ("<style>.st-key-model_picker * { max-height: none !important; } "
                ".st-key-model_picker [data-tag] { height: auto !important; } "
                ".st-key-model_picker [data-tag] > span { white-space: normal !important; overflow-wrap: anywhere; "
                "text-overflow: clip !important; }</style>")
"""Streamlit's multiselect scrolls after four rows of chips, hiding the fifth model: the model picker grows instead;
and it cuts a chip's name with "…" ("squeezenet1_0 (de…" in a 300-px sidebar): the chips wrap instead."""
CHIP_CHARS = 20
"""A chip of a name past about this many characters wraps onto a second line; then every selected model is also
written out in full below the picker, in the order of the chips."""


def _spec_path_error(spec: str) -> str | None:
    try:
        path = ModelSpec.parse(spec).path
    except FilterLensError:  # the loader explains malformed specs
        return None
    return path_policy().error(path) if path else None


def _shared_paths_only(url: Selection) -> tuple[Selection, list[str]]:
    """The URL's selection without server paths users may not read (an edited or shared link), and why."""
    errors = {spec: _spec_path_error(spec) for spec in url.specs}
    image_path = source_path(url.images)
    image_error = path_policy().error(image_path) if image_path else None
    kept = tuple(spec for spec in url.specs if errors[spec] is None)
    clean = dataclasses.replace(url, specs=kept, overrides={k: v for k, v in url.overrides.items() if k in kept},
                                images=BUNDLED if image_error else url.images)
    return clean, [error for error in (*errors.values(), image_error) if error]


def _known_specs(selection: Selection) -> list[str]:
    """The picker's options: the demos, the link's models, those added in this session and those it has picked (a
    model that came with a link stays an option on the next page, whose URL may no longer name it)."""
    demos = [f"demo:{name}" for name in demo_manifest()]
    added = st.session_state.setdefault("added_specs", [])
    return list(dict.fromkeys([*demos, *selection.specs, *added, *st.session_state.get("model_picker", [])]))


def _spec_label(spec: str) -> str:
    parsed = ModelSpec.parse(spec)
    if parsed.source == "demo":
        return f"{parsed.name} (demo)"
    if parsed.path:
        return f"{parsed.source if parsed.source in FILE_SOURCES else parsed.name}: {Path(parsed.path).name}"
    return f"{parsed.source}:{parsed.name}" + (" (pretrained)" if parsed.pretrained else " (random init)")


def spec_labels(specs: list[str]) -> dict[str, str]:
    """The picker's label of each spec: files by their name (an upload by the name it was uploaded under), with the
    name of their folder (an upload's content hash) only where two would read the same."""
    labels = {spec: _spec_label(spec) for spec in specs}
    repeated = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {spec: f"{label} · {Path(ModelSpec.parse(spec).path).parent.name[:8]}"
            if label in repeated and ModelSpec.parse(spec).path else label for spec, label in labels.items()}


def _add_spec(spec: str) -> bool:
    """Validate a new model by loading it under this session's path policy (a button's callback runs before the
    script that holds it: :func:`fl_ui.paths.users_paths`); on success add it to the picker and the selection."""
    try:
        with users_paths():
            get_model(spec)
    except FilterLensError as err:
        st.session_state["sidebar_error"] = str(err)
        return False
    st.session_state.pop("sidebar_error", None)
    if spec in st.session_state.get("model_picker", []):
        return True
    st.session_state["added_specs"] = [*st.session_state.get("added_specs", []), spec]
    st.session_state["model_picker"] = [*st.session_state.get("model_picker", []), spec]
    return True


def registry_spec(library: str, text: str, pretrained: bool) -> str:
    """The spec the architecture form names: ``library:text`` and ``@pretrained`` when ticked, where the text may
    itself be a spec as the README writes them (``timm:resnet18``, ``torchvision:squeezenet1_0@pretrained``): its
    library and tag then win."""
    named, sep, rest = text.strip().partition(":")
    if sep and named in REGISTRIES:
        library, text = named, rest.strip()
    if text.endswith(PRETRAINED_TAG):
        text, pretrained = text.removesuffix(PRETRAINED_TAG), True
    return f"{library}:{text}" + (PRETRAINED_TAG if pretrained else "")


def _on_add_registry() -> None:
    """Button callback: add the architecture the form names (:func:`registry_spec`)."""
    name = st.session_state.get("reg_name", "").strip()
    if name:
        _add_spec(registry_spec(st.session_state["reg_library"], name, bool(st.session_state.get("reg_pretrained"))))


def _registry_form() -> None:
    with st.expander("➕ Add a timm / torchvision / CIFAR architecture"):
        st.radio("Library", REGISTRIES, horizontal=True, key="reg_library")
        st.text_input("Architecture", placeholder="resnet18, convnext_tiny, timm:mobilenetv3_large_100 …",
                      key="reg_name", help="A name of the library chosen above, or a spec such as timm:resnet18 or "
                                           "torchvision:squeezenet1_0@pretrained. cifar: the CIFAR ResNets of He "
                                           "et al. 2016 (resnet20, resnet32, resnet44, resnet56, resnet110).")
        st.checkbox("Pretrained weights (needs network or a warm cache)", key="reg_pretrained")
        st.button("Add architecture", key="reg_add", on_click=_on_add_registry)


def _on_add_upload() -> None:
    """Button callback: store the uploaded file content-addressed and add it (refused files are deleted, and the
    error names the file as the user uploaded it)."""
    uploaded = st.session_state.get("ckpt_upload")
    if uploaded is None:
        st.session_state["sidebar_error"] = ("No checkpoint has reached the server yet: choose a file and, once it "
                                             "shows its size, press Add upload.")
        return
    try:
        path, is_new = upload_store().add_checkpoint(uploaded.getvalue(), uploaded.name)
    except FilterLensError as err:
        st.session_state["sidebar_error"] = str(err)
        return
    finally:
        release_upload("ckpt_upload")  # stored (or refused): Streamlit's copy of the bytes is no longer needed
    arch = st.session_state.get("ckpt_arch", "").strip()
    is_onnx = path.suffix == ONNX_SUFFIX
    spec = f"onnx:{path}" if is_onnx else f"{arch}={path}" if arch else f"weights:{path}"
    accepted, notice = False, None
    try:
        if is_onnx and arch:
            raise ModelSpecError(f"{path.name} is an ONNX model, which carries its own graph: leave the "
                                 "architecture blank (ONNX models are read for their weights only).")
        ModelSpec.parse(spec)
        if not arch:  # recognised when it is added: a CIFAR ResNet runs as one, anything else says what it can do
            with users_paths():
                spec, notice = recognised_spec(get_model(spec))
        accepted = _add_spec(spec)
    except FilterLensError as err:
        st.session_state["sidebar_error"] = str(err)
    finally:
        if not accepted and is_new:
            upload_store().discard(path)
    if not accepted:
        st.session_state["sidebar_error"] = _as_uploaded(st.session_state["sidebar_error"], path, uploaded.name)
    elif notice:
        st.session_state["sidebar_notice"] = _as_uploaded(notice, path, uploaded.name)


def _as_uploaded(message: str, path: Path, name: str) -> str:
    """``message`` with the stored upload ``path`` named as the user named it (``name``): never the server's path,
    and never a part of a longer word (a dot-file ``.pt`` is stored as ``pt``)."""
    text = upload_store().shareable(message)
    return re.sub(rf"(?<![\w.-]){re.escape(path.name)}(?![\w.-])", lambda _: name, text)


def _upload_form() -> None:
    with st.expander("⬆ Upload a checkpoint"):
        st.file_uploader("State dict (.safetensors, .pt, .pth, .th, .bin) or ONNX model (.onnx)",
                         type=[s.lstrip(".") for s in (*CHECKPOINT_SUFFIXES, ONNX_SUFFIX)], key="ckpt_upload",
                         help="ONNX models are read for their weights only (conv weights and groups from the "
                              "graph; FilterLens does not run them): energy profiles, master keys, scale-space "
                              "fits and filter views work; analyses that run the network need a PyTorch file with "
                              "its architecture.")
        st.text_input("Architecture (optional)", key="ckpt_arch",
                      placeholder="timm:resnet18, torchvision:squeezenet1_0, cifar:resnet56; blank = weights only",
                      help="Without an architecture, analyses that need only weights (energy profiles, whitening, "
                           "master keys, scale-space fits) still work. CIFAR ResNets (akamaster's or chenyaofo's "
                           "checkpoints): cifar:resnet20 … cifar:resnet110.")
        st.button("Add upload", key="ckpt_add", on_click=_on_add_upload)


def _preprocessing_form(specs: list[str], overrides: dict[str, dict]) -> dict[str, dict]:
    """Editable preprocessing for models loaded from files (registry models use their own config)."""
    editable = [s for s in specs if ModelSpec.parse(s).path]
    if not editable:
        return overrides
    with st.expander("⚙ Preprocessing of uploaded weights"):
        spec = st.selectbox("Model", editable, format_func=spec_labels(editable).get, key="pre_model")
        try:
            base = get_model(spec).input_config.with_overrides(**overrides.get(spec, {}))
        except FilterLensError:
            return overrides
        size = st.number_input("Input size (px)", 8, MAX_RESIZE_SIZE, base.input_size, key=f"pre_size_{spec}")
        crop = st.number_input("Crop fraction", 0.05, 1.0, float(base.crop_pct), step=0.025, key=f"pre_crop_{spec}")
        interp = st.selectbox("Interpolation", INTERPOLATIONS, index=INTERPOLATIONS.index(base.interpolation),
                              key=f"pre_interp_{spec}")
        mode = st.selectbox("Crop mode", CROP_MODES, index=CROP_MODES.index(base.crop_mode), key=f"pre_mode_{spec}",
                            help="timm's evaluation crop: resize the short side (center), both sides (squash) or the "
                                 "long side, padding with the mean colour (border), then crop the centre.")
        mean = st.text_input("Mean (R G B)", rgb_text(base.mean), key=f"pre_mean_{spec}")
        std = st.text_input("Std (R G B)", rgb_text(base.std), key=f"pre_std_{spec}")
        try:
            mean_v, std_v = parse_rgb(mean), parse_rgb(std)
        except ValueError:
            st.warning("Mean and std need three numbers each (R G B).")
            return overrides
        chosen = {"input_size": int(size), "crop_pct": float(crop), "interpolation": interp, "mean": mean_v,
                  "std": std_v, "crop_mode": mode}
        changed = get_model(spec).input_config.changed_fields(chosen)
        return {**overrides, spec: changed} if changed else {k: v for k, v in overrides.items() if k != spec}


IMAGE_SOURCES = ("bundled photos (offline)", "folder on the server", "upload images", "upload a labelled set")


def _images_form(current: str) -> str:
    index = 0 if is_bundled(current) else 1
    choice = st.radio("Images", IMAGE_SOURCES, index=index, key="img_choice")
    if choice == IMAGE_SOURCES[0]:
        return BUNDLED
    if choice == IMAGE_SOURCES[1]:
        folder = st.text_input("Folder, ImageFolder tree or cifar10:PATH", "" if is_bundled(current) else current,
                               key="img_folder", placeholder="/data/imagenet/val",
                               help="A folder of images; an ImageFolder tree (root/<class>/image.jpg, as ImageNet's "
                                    "val/<wnid>/*.JPEG) for accuracy; or CIFAR in torchvision's format: "
                                    "cifar10:PATH or cifar100:PATH, PATH the folder torchvision downloads it into "
                                    "(its test split; PATH@train: the training split).").strip()
        if folder and (error := path_policy().error(source_path(folder))):
            show(st.error, "{}", error)
            return BUNDLED
        return folder or BUNDLED
    if choice == IMAGE_SOURCES[3]:
        return _labelled_upload_form(current)
    files = st.file_uploader("Images", type=[s.lstrip(".") for s in IMAGE_SUFFIXES], accept_multiple_files=True,
                             key="img_upload")
    if not files:
        return current
    try:
        return str(upload_store().add_images([(f.name, f.getvalue()) for f in files]))
    except FilterLensError as err:
        show(st.error, "{}", err)
        return current


def _labelled_upload_form(current: str) -> str:
    """Images with their classes, for accuracy (top-1 / top-5): one archive of an ImageFolder tree, or images with a
    CSV of labels (:meth:`fl_ui.uploads.UploadStore.add_labelled_images`)."""
    files = st.file_uploader(
        "Archive (.zip, .tar, .tar.gz) of class folders, or images and a labels CSV",
        type=["zip", "tar", "gz", "tgz", "csv", *(s.lstrip(".") for s in IMAGE_SUFFIXES)],
        accept_multiple_files=True, key="img_labelled_upload",
        help=f"Class folders: <class>/<image>, the class an ImageNet wnid (n01440764) or one of the model's class "
             f"names (cat, dog), as ImageNet's val/<wnid>/*.JPEG. Or images side by side with a CSV of file,label "
             f"rows. At most {MAX_MEMBERS:,} files. Accuracy (top-1 / top-5) then appears on Swap & Re-score "
             "and Channel Axes.")
    if not files:
        return current
    try:
        folder = upload_store().add_labelled_images([(f.name, f.getvalue()) for f in files])
    except FilterLensError as err:
        show(st.error, "{}", err)
        return current
    show(st.caption, "{}.", get_images(str(folder)).description)
    return str(folder)


def _mark_selected_uploads_used(selection: Selection) -> None:
    """Refresh the last use of the uploads this session has selected (the store evicts the least recently used)."""
    store = upload_store()
    for path in (*(ModelSpec.parse(spec).path for spec in selection.specs), selection.images):
        if path:
            store.touch(path)


def render_sidebar() -> Selection:
    """Draw the sidebar, store the selection in the session and the URL, and return it."""
    url, refused = _shared_paths_only(selection_from_url())
    with st.sidebar:
        st.markdown("### 🔍 FilterLens")
        st.caption("What convolutional filters learn, and why.")
        for error in refused:
            show(st.error, "{}", error)
        options = _known_specs(url)
        if "model_picker" not in st.session_state:
            st.session_state["model_picker"] = [s for s in url.specs if s in options]
        labels = spec_labels(options)
        specs = st.multiselect("Models", options, format_func=labels.get, key="model_picker",
                               help="Compare several models side by side. Demo models ship with the app.")
        st.html(PICKER_STYLE)
        if any(len(labels[spec]) > CHIP_CHARS for spec in specs):
            show(st.caption, "In full: {}", "; ".join(labels[spec] for spec in specs))
        _registry_form()
        _upload_form()
        if error := st.session_state.pop("sidebar_error", None):  # said once, not on every page after
            show(st.error, "{}", error)
        if notice := st.session_state.pop("sidebar_notice", None):  # how an upload was recognised, said once
            show(st.info, "{}", notice)
        overrides = _preprocessing_form(specs, {k: v for k, v in url.overrides.items() if k in specs})
        images = _images_form(url.images)
        devices = ["auto", *available_devices()]
        device = st.selectbox("Device", devices, index=devices.index(url.device) if url.device in devices else 0,
                              key="device_choice")
    selection = Selection(specs=tuple(specs), overrides=overrides, images=images, device=device)
    st.session_state["selection"] = selection
    _mark_selected_uploads_used(selection)
    write_selection_to_url(selection)
    return selection
