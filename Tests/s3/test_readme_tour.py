"""The README's five-minute tour, run as it is written (the README is its single source).

The test takes the one ```sh block that follows the `<!-- readme-tour` marker in README.md and
runs it with `bash -euo pipefail` (a command that fails fails the test), with the settings the
README tells a reader to export above it: S3_ENDPOINT and S3_BUCKET of the session's SeaweedFS on
loopback (Tests/s3/weed.py), its AWS_* keys, and TOUR, an empty folder of the test's. `docdrive`
is the binary under test (DOCDRIVE_BIN), first on PATH; XDG_DATA_HOME is a folder of the test's,
so `docdrive desktop install` writes nothing outside it.

The block mounts two drives (two drive homes: "laptop" and "desktop") and unmounts them itself.
Whatever happens, the test ends only what it started: the block's process group on a timeout,
then any mount left under TOUR (`docdrive unmount`, `fusermount3 -uz` last) and a daemon of one of
the tour's drive homes (by the pid in its run/mount.json, checked to be that drive's daemon). It
fails if a mount was left behind by the block.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "mount"))
from ddtest import docdrive_bin, is_docdrive_mount, mounts, pid_alive, pid_is_daemon_of, stop_pid  # noqa: E402

REPO = HERE.parents[1]
MARKER = "<!-- readme-tour"
TIME_LIMIT = 240  # seconds for the whole block


def tour_block(readme: str) -> str:
    """The sh block right after the marker line: the README's tour, as a reader pastes it."""
    at = readme.find(MARKER)
    assert at >= 0, f"README.md has no {MARKER!r} marker before its tour"
    m = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M).search(readme, at)
    assert m, "no ```sh block follows the tour's marker in README.md"
    between = readme[at:m.start()].splitlines()[1:]
    assert not any(line.strip() for line in between), "the tour's block must follow its marker at once"
    return m.group(1)


def _leftovers(tour: Path) -> list[str]:
    return [mp for mp, _ in mounts() if mp == str(tour) or mp.startswith(str(tour) + "/")]


def _clean_up(tour: Path, env: dict) -> list[str]:
    """Unmounts what the tour left mounted and stops its daemons (only theirs); returns what it found."""
    found = []
    homes = [p.parent.parent for p in tour.glob("*/run/mount.json")]
    for mp in _leftovers(tour):
        found.append(f"left mounted: {mp}")
        for home in homes:
            subprocess.run([docdrive_bin(), "unmount", mp], env=dict(env, DOCDRIVE_HOME=str(home)),
                           capture_output=True, timeout=60)
            if not is_docdrive_mount(mp):
                break
        if is_docdrive_mount(mp) or mp in [m for m, _ in mounts()]:
            subprocess.run(["fusermount3", "-uz", mp], capture_output=True, timeout=30)
    for home in homes:
        try:
            pid = json.loads((home / "run" / "mount.json").read_text())["pid"]
        except (OSError, ValueError, KeyError):
            continue
        if pid_alive(pid) and pid_is_daemon_of(pid, home):
            found += [f"daemon {pid} of {home} still running"] + stop_pid(pid, home)
    return found


@pytest.mark.timeout(TIME_LIMIT + 120)
def test_readme_tour_runs_as_written(weed, tmp_path):
    script = tour_block((REPO / "README.md").read_text())
    tour = tmp_path / "tour"
    tour.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # `docdrive` on PATH, as mount.sh installs it: a link to the build's, which finds docdrive-full beside it.
    (bindir / "docdrive").symlink_to(Path(docdrive_bin()).resolve())
    env = weed.env()
    env.pop("DOCDRIVE_HOME", None)
    env.update(S3_ENDPOINT=weed.endpoint, S3_BUCKET=weed.bucket, TOUR=str(tour),
               XDG_DATA_HOME=str(tmp_path / "xdg-data"), PATH=f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}")
    (tmp_path / "tour.sh").write_text(script)
    proc = subprocess.Popen(["bash", "-euo", "pipefail", str(tmp_path / "tour.sh")], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the block's own process group only
        out, _ = proc.communicate(timeout=30)
        out += f"\n(the tour did not end within {TIME_LIMIT} s)"
        proc.returncode = -1
    finally:
        left = _clean_up(tour, env)
    logs = "".join(f"\n--- {p}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-30:])
                   for p in tour.glob("*/run/daemon.log")) if proc.returncode != 0 else ""
    assert proc.returncode == 0, f"the README's tour failed (exit {proc.returncode}):\n{out}{logs}"
    assert not left, f"the tour left something behind: {left}\n{out}"
    # What the tour says it shows, checked from its output.
    assert "placeholder" in out, out
    assert "conflict from desktop" in out, out
    assert not _leftovers(tour)
