"""docs/user/commands.md is generated from the command definitions (mount-scripts/commands_md.py
over `docdrive --experimental-dump-help`): it must be what the built program says, so a command
changed without running mount-scripts/docs.sh fails here. Needs no mount."""
from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import ddtest

REPO = Path(__file__).resolve().parents[2]


def test_commands_md_is_generated_from_the_built_program():
    p = subprocess.run([sys.executable, str(REPO / "mount-scripts" / "commands_md.py"), "--bin", ddtest.docdrive_bin(),
                        "--out", "-"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    committed = (REPO / "docs" / "user" / "commands.md").read_text()
    if p.stdout != committed:
        diff = "".join(difflib.unified_diff(committed.splitlines(True), p.stdout.splitlines(True),
                                            "docs/user/commands.md (committed)", "generated", n=2))
        raise AssertionError("docs/user/commands.md differs from the command definitions; run "
                             "mount-scripts/docs.sh and commit the result:\n" + diff[:6000])
