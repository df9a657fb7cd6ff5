"""Fixtures of the S3 store tests: `weed`, one SeaweedFS for the session (Tests/s3/weed.py),
stopped by pid at the end; in CI (CI=true) a SeaweedFS that cannot start fails the tests.
The mounted ones (test_s3_mount.py) use the mounted suite's drives: its `new_drive` (each drive
torn down by pid), the watchdog behind it and the guard that frees a test hung on the mount."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from weed import Weed, WeedUnavailable  # noqa: E402

_spec = importlib.util.spec_from_file_location("docdrive_mount_conftest",
                                               Path(__file__).resolve().parents[1] / "mount" / "conftest.py")
_mount = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mount)
pytest_configure = _mount.pytest_configure
pytest_runtest_call = _mount.pytest_runtest_call
base_dir = _mount.base_dir
new_drive = _mount.new_drive


@pytest.fixture(scope="session")
def weed(tmp_path_factory):
    w = Weed(tmp_path_factory.mktemp("weed"))
    try:
        w.start()
    except WeedUnavailable as e:
        w.stop()
        if os.environ.get("CI") == "true":
            pytest.fail(f"SeaweedFS could not start: {e}")
        pytest.skip(f"SeaweedFS could not start: {e}")
    yield w
    w.stop()
