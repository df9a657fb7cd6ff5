"""Fixtures of the mounted test suite.

* `drive` (session): a temp DOCDRIVE_HOME with a public app "Notes", a private app and a folder
  store "Work", mounted privately (no -o; test_ownership.py has its own drive mounted with
  -o allow_other, where the kernel checks permissions). Torn down at the end whatever
  happened: `docdrive unmount`, `fusermount3 -uz` as last resort, SIGTERM/SIGKILL of the daemon
  pid it started (and only that one), then it asserts nothing is left.
* `t` (function): a fresh folder for one test: `t.mnt` (inside Notes/ in the mount),
  `t.native` (a native folder on the same disk, for comparisons), `t.backing` (the backing
  folder of `t.mnt`), `t.root` (the mount root), `t.drive`.
* `new_drive` (function): a factory of private drives for lifecycle tests (each torn down).

A guard around every test SIGKILLs a daemon that is still serving when the test nears its time
limit (a FUSE deadlock would otherwise hang the test in the kernel for ever); a test whose
daemon died or hung fails and the next test gets a fresh mount.
"""
from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ddtest  # noqa: E402
from ddtest import Drive  # noqa: E402

os.umask(0o022)


def pytest_configure(config):
    # Every test has a hard time limit: without the plugin a FUSE hang would hang the run.
    if not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("the mounted tests need the pytest-timeout plugin: pip install pytest-timeout")


@pytest.fixture(scope="session")
def base_dir():
    """The session's temp folder (on the same disk as the backing folders); removed at the end."""
    base = Path(tempfile.mkdtemp(prefix="docdrive-mount-tests-"))
    os.chmod(base, 0o755)
    state = base / "watchdog.json"
    state.write_text("[]")
    ddtest.WATCHDOG_STATE = state
    wd = subprocess.Popen([sys.executable, str(ddtest.HERE / "_watchdog.py"), str(os.getpid()), str(state)],
                          start_new_session=True, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield base
    left = [d for d in list(ddtest.LIVE.values())]
    problems = []
    for d in left:
        problems += d.teardown()
    ddtest.WATCHDOG_STATE = None
    state.unlink(missing_ok=True)
    try:
        wd.wait(timeout=5)
    except subprocess.TimeoutExpired:
        wd.kill()
    ddtest.cleanup_folder(base)
    assert not left, f"drives left mounted by tests: {[str(d.mnt) for d in left]} {problems}"


@pytest.fixture(scope="session")
def drive(base_dir):
    d = Drive(base_dir / "shared").create()
    (base_dir / "native").mkdir(exist_ok=True)  # a module with its own drive may have made it
    try:
        d.mount()
    except AssertionError as e:
        pytest.fail(str(e))  # never a skip: a drive that does not mount is a failure
    yield d
    pid = d.pid
    problems = d.teardown()
    assert not problems, f"teardown of the shared mount: {problems}"
    assert not ddtest.is_docdrive_mount(d.mnt)
    assert not (pid and ddtest.pid_alive(pid) and ddtest.pid_is_daemon_of(pid, d.home)), "daemon left behind"


@pytest.fixture
def new_drive(base_dir, request):
    """Factory: new_drive() -> an unmounted, configured Drive in its own folder."""
    made = []

    def make():
        # A number of the session: two parametrized tests whose names differ only past the
        # slug's 80 characters ([folder], [s3]) must not share a drive folder.
        d = Drive(base_dir / f"{_slug(request.node.name)}-{next(_drives)}-{os.getpid()}").create()
        made.append(d)
        return d

    yield make
    problems = []
    for d in made:
        pid = d.pid
        problems += d.teardown()
        if pid and ddtest.pid_alive(pid) and ddtest.pid_is_daemon_of(pid, d.home):
            problems.append(f"daemon {pid} left behind")
    assert not problems, problems


@dataclass
class TestDirs:
    mnt: Path
    native: Path
    backing: Path
    root: Path
    drive: Drive


_seq = itertools.count()
_drives = itertools.count()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]


@pytest.fixture
def t(drive, request):
    """A fresh folder for this test in Notes/, its native twin and its backing folder."""
    if not drive.healthy():
        # An earlier test killed or hung the daemon (and failed for it): start a fresh mount.
        drive.teardown()
        drive.mount()
    name = f"{_slug(request.node.name)}-{next(_seq)}"
    mnt = drive.mnt / "Notes" / name
    native = drive.base.parent / "native" / name
    mnt.mkdir()
    native.mkdir(parents=True)  # (a module with a drive of its own, run alone, has no native folder yet)
    yield TestDirs(mnt=mnt, native=native, backing=drive.notes_backing / name, root=drive.mnt, drive=drive)
    if not (drive.pid and ddtest.pid_alive(drive.pid)):
        pytest.fail(f"the daemon died during this test; log:\n{drive.log_tail()}")


@pytest.fixture
def root(drive):
    if not drive.healthy():
        drive.teardown()
        drive.mount()
    yield drive.mnt
    if not (drive.pid and ddtest.pid_alive(drive.pid)):
        pytest.fail(f"the daemon died during this test; log:\n{drive.log_tail()}")


def _item_timeout(item) -> float:
    m = item.get_closest_marker("timeout")
    if m and m.args:
        return float(m.args[0])
    try:
        return float(item.config.getini("timeout") or 300)
    except (ValueError, KeyError):
        return 300.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Deadlock breaker: shortly before the time limit, SIGKILL every daemon this session runs
    (that aborts the FUSE connection and frees the test from the kernel), and fail the test."""
    limit = _item_timeout(item)
    fired = []

    def fire():
        fired.append(True)
        for d in list(ddtest.LIVE.values()):
            d.kill_hard()

    timer = threading.Timer(max(limit - 10, limit * 0.8), fire)
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()
        if fired:
            logs = "\n".join(f"--- {d.log_path}\n{d.log_tail()}" for d in ddtest.LIVE.values())
            raise AssertionError(f"test hung near its {limit:.0f} s limit: the daemon was killed to free it\n{logs}")
