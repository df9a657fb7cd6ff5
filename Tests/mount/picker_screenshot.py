"""Takes the screenshot of the document picker in docs/user/picker.png:
`python3 Tests/mount/picker_screenshot.py docs/user/picker.png` (with DOCDRIVE_BIN, as the
mounted tests; needs Xvfb, xdotool and ImageMagick's import).

A drive made for it in a temporary folder: the public apps Notes and Writer, the folder stores
Work and Archive, a few documents in Work/Reports (two with a picture, evicted: placeholders),
mounted at ~/Drive of a neutral home (a temporary HOME named "ann", no bookmarks), in a display
of its own. The picker (open mode, for Writer) is shown over
Work/Reports with a placeholder selected: its sync state in the list, its picture as its icon
and in the preview. Everything started here is stopped by pid, the drive unmounted.
"""
from __future__ import annotations

import os
import shutil
import struct
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ddtest import Drive, run, wait_until  # noqa: E402
from test_picker import Desk, Picker, start_display, stop_display, xattr  # noqa: E402
from test_placeholders import odt_with_picture  # noqa: E402


def page_png(heading: tuple[int, int, int], w=180, h=256) -> bytes:
    """A picture of a document's first page: white, a coloured heading, grey lines of text."""
    rows = []
    for y in range(h):
        row = bytearray()
        for x in range(w):
            if x < 2 or x >= w - 2 or y < 2 or y >= h - 2:
                px = (200, 200, 200)
            elif 18 <= y < 40 and 16 <= x < w - 16:
                px = heading
            elif y >= 56 and (y - 56) % 14 < 5 and 16 <= x < (w - 16 if (y - 56) // 14 % 4 != 3 else w // 2):
                px = (150, 150, 150)
            else:
                px = (255, 255, 255)
            row += bytes(px)
        rows.append(b"\0" + bytes(row))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))


def main(out: Path):
    base = Path(tempfile.mkdtemp(prefix="docdrive-shot-"))
    os.chmod(base, 0o755)
    home = base / "ann"  # the user's (neutral) home: no bookmarks, ~/Drive the mount
    (home / "config").mkdir(parents=True)
    d = Drive(base / "drive")
    d.mnt = home / "Drive"
    d.create()
    runtime = base / "run"
    runtime.mkdir(mode=0o700)
    d.extra_env["XDG_RUNTIME_DIR"] = str(runtime)
    k = Desk(d, runtime)
    p = None
    try:
        d.cli("app", "add", "org.example.writer", "--name", "Writer", "--public")
        d.cli("store", "add", "archive", "--name", "Archive", "--folder", str(base / "nas"))
        d.mount()
        reports = d.mnt / "Work" / "Reports"
        reports.mkdir()
        docs = {
            "Q3 report.odt": odt_with_picture(page_png((32, 96, 200)), "Q3 report"),
            "Budget 2027.odt": odt_with_picture(page_png((40, 150, 90)), "Budget"),
            "Minutes 12-01.txt": b"Minutes of the meeting of 1 December\n",
            "Roadmap.txt": b"Q4: the picker\n",
        }
        for name, body in docs.items():
            (reports / name).write_bytes(body)
        (d.mnt / "Work" / "Contracts").mkdir()
        (d.mnt / "Archive" / "Letters").mkdir()
        (d.mnt / "Notes" / "todo.txt").write_bytes(b"buy milk\n")
        for name in ("Q3 report.odt", "Budget 2027.odt"):
            assert wait_until(lambda: xattr(reports / name, "user.docdrive.thumbnail") is not None, 20), f"no picture of {name}"
        d.cli("sync", "--timeout", "60", timeout=90)
        for name in ("Q3 report.odt", "Budget 2027.odt"):
            d.cli("evict", str(reports / name))
        (reports / "Draft.txt").write_bytes(b"a draft, saved a moment ago\n")  # shown waiting to upload (or synced, if quick)
        start_display(k)
        tmp = base / "picker"
        p = Picker(k, tmp, "--app", "org.example.writer", "--mode", "open", home=home)
        p.shown()
        p.go_to("Work/Reports")
        p.wait_for(lambda: {"Q3 report.odt", "Roadmap.txt"} <= set(p.rows(reports)), "the rows of Work/Reports")
        # The placeholder selected (Down from the first row, which GTK selects, until it is).
        target = str(reports / "Q3 report.odt")
        for _ in range(8):
            if any(r[0] == target for r in p.logged("preview")):
                break
            p.key("Down")
            wait_until(lambda: any(r[0] == target for r in p.logged("preview")), 1, 0.1)
        p.wait_for(lambda: [target, "placeholder", "picture"] in p.logged("preview"), "the placeholder's picture")
        p.wait_for(lambda: [target] in p.logged("icon"), "the picture as the row's icon")
        shot = tmp / "picker.png"
        run(["import", "-display", k.display, "-window", "root", "-crop", "860x540+0+0", "+repage", str(shot)], env=p.env, timeout=30)
        shutil.copy(shot, out)
        p.escape()
        p.finish()
    finally:
        if p is not None:
            p.stop()
        left = stop_display(k)
        problems = d.teardown()
        if not problems:  # (never through a mount that is still there)
            shutil.rmtree(base, ignore_errors=True)
    assert not problems and not left, (problems, left)
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
