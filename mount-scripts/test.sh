#!/usr/bin/env bash
# test.sh: install what is missing, build, and run every test (unit tests, then the mounted suite).
# test.sh --quick: the unit tests and a mounted smoke set (a few minutes), for the loop.
# Extra arguments go to pytest (e.g. -k rename). In CI (CI=true) a test that cannot mount fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$DOCDRIVE_REPO"

quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
# The smoke set: file I/O, real tools, the CLI, upload states, the command reference, two devices
# on a folder and an S3 remote, and the S3 store.
QUICK_MOUNTED=(Tests/mount/test_file_io.py Tests/mount/test_tools.py Tests/mount/test_cli.py
    Tests/mount/test_upload_status.py Tests/mount/test_commands_doc.py
    "Tests/mount/test_many_devices.py::test_changes_travel_both_ways_and_renames_keep_the_id")
QUICK_S3=(Tests/s3/test_s3_store.py)

install_runtime_deps
# What the mounted tests use: real tools, xattr helpers, and python's test runner.
apt_install rsync git attr tar util-linux python3 python3-pip python3-venv vim procps diffutils findutils coreutils sqlite3 zip bubblewrap curl
# The editors whose saves the tests make for real (test_editor_saves.py): GIO's `gio save`,
# Emacs, LibreOffice (headless, without its recommended extras).
if [ "$quick" = 0 ]; then
    apt_install libglib2.0-bin
    APT_NO_RECOMMENDS=1 apt_install emacs-nox libreoffice-writer-nogui poppler-utils
    # The file manager test (test_desktop.py): Nautilus and its python bindings under Xvfb, with a
    # session bus, and ImageMagick's `import` for the screenshot. The picker test (test_picker.py):
    # GTK 3 for Debian's python3 (what `docdrive pick` runs), and xdotool, which types in it.
    APT_NO_RECOMMENDS=1 apt_install nautilus python3-nautilus xvfb dbus imagemagick python3-gi gir1.2-gtk-3.0 xdotool
    # The package test (Tests/package): debootstrap makes its Debian 12 root without Swift.
    apt_install debootstrap
fi
python3 -c 'import pytest, pytest_timeout' 2>/dev/null \
    || python3 -m pip install -q pytest pytest-timeout 2>&1 | tail -n 2 \
    || python3 -m pip install -q --break-system-packages pytest pytest-timeout

# SeaweedFS for the S3 tests (they start and stop it themselves, on loopback only).
DOCDRIVE_WEED=$(install_weed)
export DOCDRIVE_WEED
# Every state's invariants are checked, in the unit tests and in the daemons the tests start
# (Sources/DocDriveCore/Support/Invariants.swift): a broken one stops the test where it broke.
export DOCDRIVE_CHECKS=1

bin=$(build_release)

# Nothing of ours may outlive the suite.
check_nothing_left() {
    if pgrep -f "$DOCDRIVE_REPO/.venv-weed/bin/weed mini" >/dev/null; then
        say "test.sh: a SeaweedFS of the tests was left running:"; pgrep -af "$DOCDRIVE_REPO/.venv-weed/bin/weed mini" >&2
        mounted=1
    fi
    if grep -q ' fuse.docdrive ' /proc/mounts; then
        say "test.sh: a DocDrive mount was left behind:"; grep ' fuse.docdrive ' /proc/mounts >&2
        grep ' fuse.docdrive ' /proc/mounts | awk '{print $2}' | while read -r m; do fusermount3 -uz "$m" || true; done
        mounted=1
    fi
}

exit_with_totals() {
    if [ "$unit" -ne 0 ] || [ "$mounted" -ne 0 ]; then
        say "test.sh: FAILED (unit tests exit $unit, mounted tests exit $mounted)"
        exit 1
    fi
    say "test.sh: all tests passed"
    exit 0
}

set +e
say "== unit tests (swift test, with a SeaweedFS for the S3 remote's tests) =="
# Without testable imports (the tests use none) the release build above is reused; with them
# every module would be compiled again with -enable-testing (about 9 minutes on 2 cores).
python3 Tests/s3/weed.py run -- swift test -c release --disable-testable-imports 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] (Compiling|Emitting|Linking|Write|Build)'
unit=${PIPESTATUS[0]}

# The mounted suite runs with FUSE over io_uring, as mount.sh mounts (test_io_uring.py fails on
# a kernel without it); a second pass runs the POSIX, lock and release-barrier modules through
# /dev/fuse, the daemon's way when the kernel offers no rings. The parameter is put back after.
uring_before=$(enable_fuse_uring)
if [ "$quick" = 1 ]; then
    say "== mounted smoke set (pytest) =="
    DOCDRIVE_BIN="$bin" timeout --kill-after=30 600 python3 -m pytest -q -p no:cacheprovider "${QUICK_MOUNTED[@]}" "$@"
    mounted=$?
    [ "$mounted" -eq 5 ] && mounted=0  # every one deselected by the extra arguments
    DOCDRIVE_BIN="$bin" timeout --kill-after=30 300 python3 -m pytest -q -p no:cacheprovider "${QUICK_S3[@]}" "$@"
    s3=$?
    [ "$s3" -eq 5 ] && s3=0
    [ "$s3" -ne 0 ] && mounted=$s3
    [ -n "$uring_before" ] && as_root sh -c "echo $uring_before > $URING_PARAM"
    set -e
    check_nothing_left
    exit_with_totals
fi
say "== mounted tests (pytest) =="
DOCDRIVE_BIN="$bin" timeout --kill-after=30 1500 python3 -m pytest -q -p no:cacheprovider Tests/mount "$@"
mounted=$?

say "== mounted tests through /dev/fuse (DOCDRIVE_FUSE_URING=0) =="
classic=(Tests/mount/test_posix.py Tests/mount/test_locks.py Tests/mount/test_concurrency.py Tests/mount/test_upload_status.py)
DOCDRIVE_FUSE_URING=0 DOCDRIVE_BIN="$bin" timeout --kill-after=30 600 python3 -m pytest -q -p no:cacheprovider "${classic[@]}" "$@"
c=$?
[ "$c" -eq 5 ] && c=0  # every one deselected by the extra arguments
[ "$c" -ne 0 ] && mounted=$c

say "== S3 store tests (pytest, SeaweedFS) =="
DOCDRIVE_BIN="$bin" timeout --kill-after=30 900 python3 -m pytest -q -p no:cacheprovider Tests/s3 "$@"
s3=$?
[ "$s3" -eq 5 ] && s3=0  # every S3 test deselected by the extra arguments
[ "$s3" -ne 0 ] && mounted=$s3

# The test makes the package with package.sh (from the build above) and installs it into a
# cached debootstrap root (/var/cache/docdrive-test), fetching its dependencies from Debian.
say "== the Debian package (package.sh; apt install, mount, apt remove in a root without Swift) =="
timeout --kill-after=30 900 python3 -m pytest -q -p no:cacheprovider Tests/package "$@"
p=$?
[ "$p" -eq 5 ] && p=0  # deselected by the extra arguments
[ "$p" -ne 0 ] && mounted=$p
[ -n "$uring_before" ] && as_root sh -c "echo $uring_before > $URING_PARAM"

# The fuzzers (mount-scripts/fuzz.sh): every target over its corpus (which holds the inputs of
# the crashes fixed so far) and 2 s of new inputs each. Built in .build, after every other tier:
# the dependencies of the release build are reused, only DocDriveCore is compiled again
# (instrumented), and the next release build compiles it again as it was. Skipped with extra
# arguments (a part of the suite was asked for).
if [ $# -eq 0 ]; then
    say "== fuzzers (a short run of every target over its corpus) =="
    FUZZ_SCRATCH=${FUZZ_SCRATCH:-.build} mount-scripts/fuzz.sh all --time "${DOCDRIVE_FUZZ_SECONDS:-2}"
    fuzz=$?
    [ "$fuzz" -ne 0 ] && mounted=$fuzz
fi
set -e

check_nothing_left
exit_with_totals
