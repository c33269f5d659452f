"""Labelled image sets uploaded as an archive or as images with a CSV: the layouts users make, and hostile archives.

:data:`HOSTILE` is the corpus (``bench/bench_archive_refusals.py`` measures each refusal's time and peak memory in a
fresh process): zip bombs (by ratio, by members sharing their data, a gzip stream), ``..`` and absolute member names,
symbolic and hard links, 10⁵ members, nested archives, non-image members, duplicate names, oversized headers.
"""

from __future__ import annotations

import csv
import io
import struct
import tarfile
import time
import tracemalloc
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fl_core.errors import DataError
from fl_core.io.image_archives import MAX_MEMBER_BYTES, save_labelled_set
from fl_core.io.images import folder_images

WNIDS = ("n01440764", "n01443537")
MAX_REFUSAL_SECONDS = 10.0
MAX_REFUSAL_MIB = 64
"""A refusal's Python allocations (tracemalloc): far below the payload it refuses (gigabytes when unpacked)."""


def image_bytes(seed: int, suffix: str = ".jpg") -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (24, 32, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG" if suffix == ".jpg" else "PNG")
    return out.getvalue()


def tree_members(top: str = "") -> dict[str, bytes]:
    """An ImageFolder tree of 2 wnid classes × 2 images, optionally inside one top folder."""
    return {f"{top}{wnid}/{wnid}_{i}.jpg": image_bytes(10 * c + i) for c, wnid in enumerate(WNIDS) for i in range(2)}


def zip_bytes(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression) as archive:
        warnings.simplefilter("ignore")  # duplicate names, on purpose in one case
        for name, data in members.items() if isinstance(members, dict) else members:
            archive.writestr(name, data)
    return out.getvalue()


def tar_bytes(members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as archive:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                archive.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                archive.addfile(info, io.BytesIO(member[1]))
    return out.getvalue()


def link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


# ----------------------------------------------------------------------------------------------- layouts users make


def written(tmp_path: Path, files: list[tuple[str, bytes]]):
    result = save_labelled_set(files, tmp_path / "set")
    return result, folder_images(tmp_path / "set")


@pytest.mark.parametrize("top", ["", "val/"])
def test_zip_of_an_imagefolder_tree_becomes_a_labelled_tree(tmp_path: Path, top: str) -> None:
    result, images = written(tmp_path, [("val.zip", zip_bytes(tree_members(top)))])
    assert result.n_images == 4 and result.classes == WNIDS
    assert images.labelled and images.classes == WNIDS and sorted(images.labels) == [0, 0, 1, 1]
    assert {p.suffix for p in (tmp_path / "set").rglob("*.*")} == {".png"}  # decoded and re-encoded, never kept raw


def test_tar_gz_made_with_tar_czf_dot(tmp_path: Path) -> None:
    members = [link(".", "", tarfile.DIRTYPE), *((f"./{n}", d) for n, d in tree_members().items())]
    result, images = written(tmp_path, [("set.tar.gz", tar_bytes(members))])
    assert result.classes == WNIDS and len(images) == 4


def test_plain_tar_with_macos_litter(tmp_path: Path) -> None:
    members = [*tree_members().items(), ("__MACOSX/n01440764/._a.jpg", b"\0"), (".DS_Store", b"\0")]
    result, _ = written(tmp_path, [("set.tar", tar_bytes(members, "w"))])
    assert result.n_images == 4 and any("skipped 2 system" in note for note in result.notes)


def labels_csv(rows: list[tuple[str, str]], header: bool = True) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    if header:
        writer.writerow(["filename", "label"])
    writer.writerows(rows)
    return out.getvalue().encode()


def test_images_with_a_labels_csv(tmp_path: Path) -> None:
    files = [(f"img{i}.jpg", image_bytes(i)) for i in range(3)]
    table = labels_csv([("img0.jpg", "cat"), ("img1.jpg", "dog"), ("img2.jpg", "cat"), ("other.jpg", "dog")])
    result, images = written(tmp_path, [*files, ("labels.csv", table)])
    assert result.classes == ("cat", "dog") and sorted(images.labels) == [0, 0, 1]
    assert any("1 row(s)" in note for note in result.notes)


def test_zip_of_flat_images_and_labels_csv_in_a_top_folder(tmp_path: Path) -> None:
    members = {"set/a.png": image_bytes(1, ".png"), "set/b.png": image_bytes(2, ".png"),
               "set/labels.csv": labels_csv([("a.png", "n01440764"), ("b.png", "n01443537")], header=False)}
    result, _ = written(tmp_path, [("set.zip", zip_bytes(members))])
    assert result.classes == WNIDS


@pytest.mark.parametrize(("files", "message"), [
    ([("a.jpg", image_bytes(0)), ("labels.csv", labels_csv([("b.jpg", "cat")]))], r"1 image\(s\) have no row"),
    ([("a.jpg", image_bytes(0)), ("labels.csv", labels_csv([("a.jpg", "../etc")]))], r"cannot name a folder"),
    ([("a.jpg", image_bytes(0))], r"side by side with one CSV"),
    ([("set.zip", b"PK"), ("a.jpg", image_bytes(0))], r"on its own"),
    ([("a.jpg", b"not an image"), ("labels.csv", labels_csv([("a.jpg", "cat")]))], r"not a readable image"),
])
def test_unusable_uploads_say_what_to_do(tmp_path: Path, files, message: str) -> None:
    with pytest.raises(DataError, match=message):
        save_labelled_set(files, tmp_path / "set")


# --------------------------------------------------------------------------------------------------- hostile corpus


def zip_bomb_ratio() -> bytes:
    """One 60 MiB member of zeros, deflated to 60 KiB (1000:1), under the per-image size limit."""
    return zip_bytes({"n01440764/bomb.png": bytes(60 * 2**20)})


def zip_bomb_overlapping() -> bytes:
    """Fifield's non-recursive zip bomb, simplified: 1,000 central-directory entries all pointing at one deflated
    10 MiB member, so the archive claims 10 GiB from 10 KiB of compressed data."""
    single = zip_bytes({"n01440764/0000.png": bytes(10 * 2**20)})
    end = single.rindex(b"PK\x05\x06")
    directory_offset = struct.unpack_from("<L", single, end + 16)[0]
    entry = single[directory_offset:end]
    name = b"n01440764/0000.png"
    directory = b"".join(entry.replace(name, f"n01440764/{i:04d}.png".encode()) for i in range(1000))
    tail = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1000, 1000, len(directory), directory_offset, 0)
    return single[:directory_offset] + directory + tail


def gzip_bomb() -> bytes:
    """A tar.gz whose members are each under the size limit, 60 MiB of zeros apiece, inflating 1000:1."""
    return tar_bytes([(f"n01440764/{i}.png", bytes(60 * 2**20)) for i in range(3)])


def many_zip_members(count: int = 100_000) -> bytes:
    return zip_bytes([(f"n01440764/{i}.png", b"") for i in range(count)], zipfile.ZIP_STORED)


def many_tar_members(count: int = 100_000) -> bytes:
    header = tarfile.TarInfo("n01440764/00000.png").tobuf()
    blocks = io.BytesIO()
    for i in range(count):
        named = bytearray(header)
        named[10:15] = f"{i:05d}".encode()
        named[148:156] = b" " * 8
        named[148:155] = f"{sum(named):06o}\0".encode()
        blocks.write(named)
    blocks.write(bytes(1024))
    return blocks.getvalue()


def tar_with_huge_pax_header() -> bytes:
    """An extended header claiming 1 GiB (tarfile would read it into memory whole) in a 1 KiB file."""
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, 2**30
    return info.tobuf(tarfile.USTAR_FORMAT) + bytes(512)


def zip_symlink() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        info = zipfile.ZipInfo("n01440764/link.png")
        info.external_attr = (0o120777 << 16)
        archive.writestr(info, "/etc/passwd")
    return out.getvalue()


HOSTILE: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "zip bomb (ratio)": ("bomb.zip", zip_bomb_ratio, r"times larger than it is stored"),
    "zip bomb (overlapping members)": ("overlap.zip", zip_bomb_overlapping, r"members sharing their data"),
    "gzip bomb": ("bomb.tar.gz", gzip_bomb, r"decompression bomb"),
    "member over the size limit": ("big.tar", lambda: tar_bytes([("n01440764/a.png", bytes(MAX_MEMBER_BYTES + 1))],
                                                                "w"), r"67,108,865 bytes is over the 64 MiB limit"),
    "10^5 zip members": ("many.zip", many_zip_members, r"100,000 or more files, over the limit of 20,000"),
    "10^5 tar members": ("many.tar", many_tar_members, r"20,001 or more files"),
    "huge pax header": ("pax.tar", tar_with_huge_pax_header, r"extended tar header"),
    "zip member ../": ("dotdot.zip", lambda: zip_bytes({"../n01440764/evil.png": image_bytes(0, ".png")}),
                       r"outside the archive"),
    "tar member ../../": ("dotdot.tar.gz", lambda: tar_bytes([("n01440764/../../../evil.png", image_bytes(0))]),
                          r"outside the archive"),
    "absolute member": ("absolute.tar", lambda: tar_bytes([("/etc/cron.d/evil.png", image_bytes(0))], "w"),
                        r"absolute"),
    "backslash member": ("windows.zip", lambda: zip_bytes({"..\\..\\evil.png": image_bytes(0)}), r"backslashes"),
    "zip symlink": ("link.zip", zip_symlink, r"symbolic link"),
    "tar symlink": ("link.tar.gz", lambda: tar_bytes([link("n01440764/a.png", "/etc/passwd", tarfile.SYMTYPE)]),
                    r"symbolic link"),
    "tar hard link": ("hard.tar.gz", lambda: tar_bytes([link("n01440764/a.png", "/etc/shadow", tarfile.LNKTYPE)]),
                      r"hard link"),
    "tar device": ("device.tar", lambda: tar_bytes([link("n01440764/a.png", "", tarfile.CHRTYPE)], "w"),
                   r"not a plain file"),
    "nested archive": ("nested.zip", lambda: zip_bytes({"n01440764/inner.zip": zip_bytes(tree_members())}),
                       r"archive inside the archive"),
    "non-image member": ("script.zip", lambda: zip_bytes({**tree_members(), "n01440764/run.sh": b"rm -rf /"}),
                         r"not an image"),
    "duplicate names": ("twice.zip", lambda: zip_bytes([("n01440764/a.jpg", image_bytes(0)),
                                                        ("n01440764/a.jpg", image_bytes(1))]), r"twice"),
    "same stored name": ("clash.zip", lambda: zip_bytes({"n01440764/a.jpg": image_bytes(0),
                                                         "n01440764/a.png": image_bytes(1, ".png")}),
                         r"would both be stored"),
    "not an archive": ("noise.zip", lambda: np.random.default_rng(0).bytes(4096), r"neither a zip nor a tar"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_archives_are_refused_quickly_in_little_memory(tmp_path: Path, case: str) -> None:
    name, build, message = HOSTILE[case]
    data = build()
    start = time.perf_counter()
    with pytest.raises(DataError, match=message):
        save_labelled_set([(name, data)], tmp_path / "set")
    seconds = time.perf_counter() - start
    tracemalloc.start()  # a second refusal, traced (tracing slows Python code several times)
    try:
        with pytest.raises(DataError, match=message):
            save_labelled_set([(name, data)], tmp_path / "set")
        peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert seconds < MAX_REFUSAL_SECONDS and peak_mib < MAX_REFUSAL_MIB, (seconds, peak_mib)
    assert not [path for path in tmp_path.rglob("*") if path.is_file()]  # nothing written, inside or outside
