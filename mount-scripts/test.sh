#!/usr/bin/env bash
# test.sh: install what is missing, build, and run every test (unit tests, then the mounted suite).
# Extra arguments go to pytest (e.g. -k rename). In CI (CI=true) a test that cannot mount fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$DOCDRIVE_REPO"

install_runtime_deps
# What the mounted tests use: real tools, xattr helpers, and python's test runner.
apt_install rsync git attr tar util-linux python3 python3-pip vim procps diffutils findutils coreutils sqlite3 zip bubblewrap
# The editors whose saves the tests make for real (test_editor_saves.py): GIO's `gio save`,
# Emacs, LibreOffice (headless, without its recommended extras).
apt_install libglib2.0-bin
APT_NO_RECOMMENDS=1 apt_install emacs-nox libreoffice-writer-nogui poppler-utils
python3 -c 'import pytest, pytest_timeout' 2>/dev/null \
    || python3 -m pip install -q pytest pytest-timeout 2>&1 | tail -n 2 \
    || python3 -m pip install -q --break-system-packages pytest pytest-timeout

bin=$(build_release)

set +e
say "== unit tests (swift test) =="
swift test -c release 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] (Compiling|Emitting|Linking|Write|Build)'
unit=${PIPESTATUS[0]}

say "== mounted tests (pytest) =="
DOCDRIVE_BIN="$bin" timeout --kill-after=30 1500 python3 -m pytest -q -p no:cacheprovider Tests/mount "$@"
mounted=$?
set -e

# Nothing of ours may outlive the suite.
if grep -q ' fuse.docdrive ' /proc/mounts; then
    say "test.sh: a DocDrive mount was left behind:"; grep ' fuse.docdrive ' /proc/mounts >&2
    grep ' fuse.docdrive ' /proc/mounts | awk '{print $2}' | while read -r m; do fusermount3 -uz "$m" || true; done
    mounted=1
fi

if [ "$unit" -ne 0 ] || [ "$mounted" -ne 0 ]; then
    say "test.sh: FAILED (unit tests exit $unit, mounted tests exit $mounted)"
    exit 1
fi
say "test.sh: all tests passed"
