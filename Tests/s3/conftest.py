"""Fixtures of the S3 store tests: `weed`, one SeaweedFS for the session (Tests/s3/weed.py),
stopped by pid at the end; in CI (CI=true) a SeaweedFS that cannot start fails the tests."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from weed import Weed, WeedUnavailable  # noqa: E402


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
