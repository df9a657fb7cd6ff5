"""Last-resort cleaner for the mounted tests (not a test module).

Started by conftest.py in its own session: `python3 _watchdog.py PYTEST_PID STATE_FILE`.
STATE_FILE holds the drives the pytest process has mounted ([{"mnt", "pid", "home"}]). If the
pytest process dies without cleaning up (killed, os._exit after a timeout), this SIGKILLs each
listed daemon (only if it is a docdrive serving that home) and lazily unmounts its mount point.
It exits when the state file is removed (normal end of the session).
"""
import json
import os
import signal
import subprocess
import sys
import time


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def ours(pid, home):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return bool(argv) and b"docdrive" in argv[0] and os.fsencode(home) in argv


def main():
    parent, state = int(sys.argv[1]), sys.argv[2]
    while True:
        if not os.path.exists(state):
            return
        if not alive(parent):
            break
        time.sleep(0.5)
    try:
        with open(state) as f:
            drives = json.load(f)
    except (OSError, ValueError):
        drives = []
    for d in drives:
        pid = d.get("pid")
        if pid and ours(pid, d["home"]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["fusermount3", "-uz", d["mnt"]], timeout=30, capture_output=True)
    try:
        os.unlink(state)
    except OSError:
        pass


if __name__ == "__main__":
    main()
