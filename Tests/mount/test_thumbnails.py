"""Thumbnails (issue 18): a document saved in a store gets a picture, kept with its item and
readable as `user.docdrive.thumbnail` (also through a reference) without reading the document,
and written into the freedesktop thumbnail cache with Thumb::URI, Thumb::MTime and Thumb::Size
matching what `stat` shows, so that a file manager shows it and never opens the file.
ODF documents carry their own picture; PDFs go through pdftoppm (poppler-utils)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from ddtest import NOTES_ID, run, wait_until

pytestmark = pytest.mark.timeout(180)


def png_chunks(data: bytes) -> dict[str, str]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    out, i = {}, 8
    while i < len(data):
        length, kind = struct.unpack(">I4s", data[i:i + 8])
        body = data[i + 8:i + 8 + length]
        if kind == b"tEXt":
            k, v = body.split(b"\0", 1)
            out[k.decode()] = v.decode()
        i += 12 + length
    return out


def soffice(args, profile):
    run(["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--norestore", *args], timeout=120)


def xattr(path, name):
    try:
        return os.getxattr(path, name)
    except OSError:
        return None


def test_a_saved_document_gets_a_thumbnail_in_its_item_and_the_freedesktop_cache(new_drive, tmp_path):
    if shutil.which("soffice") is None:
        pytest.fail("LibreOffice is not installed; mount-scripts/test.sh installs it")
    d = new_drive()
    cache = tmp_path / "cache"
    d.extra_env = {"XDG_CACHE_HOME": str(cache)}
    d.mount()
    src = tmp_path / "report.txt"
    src.write_text("A report with a picture\n")
    soffice(["--convert-to", "odt", "--outdir", str(tmp_path), str(src)], tmp_path / "profile")
    odt = tmp_path / "report.odt"
    with zipfile.ZipFile(odt) as z:
        embedded = z.read("Thumbnails/thumbnail.png")
    shown = d.mnt / "Work" / "report.odt"
    shutil.copyfile(odt, shown)
    assert wait_until(lambda: xattr(shown, "user.docdrive.thumbnail") is not None, 15), "no thumbnail was made"
    assert xattr(shown, "user.docdrive.thumbnail") == embedded
    # Through a reference: the same picture, the document itself not opened.
    ref = Path(json.loads(d.cli("open", "--app", NOTES_ID, "Work/report.odt", "--json").stdout)["reference_absolute"])
    assert xattr(ref, "user.docdrive.thumbnail") == embedded
    # The freedesktop cache: large/MD5(URI).png with the keys file managers check.
    uri = "file://" + urllib.parse.quote(str(shown))
    cached = cache / "thumbnails" / "large" / (hashlib.md5(uri.encode()).hexdigest() + ".png")
    assert wait_until(cached.exists, 10), f"{cached} was not written"
    keys = png_chunks(cached.read_bytes())
    st = os.stat(shown)
    assert keys["Thumb::URI"] == uri
    assert keys["Thumb::MTime"] == str(int(st.st_mtime)) and keys["Thumb::Size"] == str(st.st_size)
    assert oct(cached.stat().st_mode & 0o777) == "0o600"
    # A file that is not a document gets none.
    (d.mnt / "Work" / "plain.txt").write_text("no picture\n")
    d.cli("sync", "--timeout", "30")
    assert xattr(d.mnt / "Work" / "plain.txt", "user.docdrive.thumbnail") is None


def test_a_pdf_gets_its_first_page(new_drive, tmp_path):
    if shutil.which("pdftoppm") is None or shutil.which("soffice") is None:
        pytest.fail("pdftoppm (poppler-utils) and LibreOffice are installed by mount-scripts/test.sh")
    d = new_drive()
    d.extra_env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    d.mount()
    src = tmp_path / "slides.txt"
    src.write_text("Page one\n")
    soffice(["--convert-to", "pdf", "--outdir", str(tmp_path), str(src)], tmp_path / "profile")
    shown = d.mnt / "Work" / "slides.pdf"
    shutil.copyfile(tmp_path / "slides.pdf", shown)
    assert wait_until(lambda: xattr(shown, "user.docdrive.thumbnail") is not None, 20), "no thumbnail of the PDF"
    png = xattr(shown, "user.docdrive.thumbnail")
    width, height = struct.unpack(">II", png[16:24])
    assert max(width, height) == 256, (width, height)
