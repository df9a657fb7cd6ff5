#!/usr/bin/env bash
# unmount.sh [MOUNTPOINT]: unmount cleanly and wait for the daemon to finish its work.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

mountpoint=${1:-$HOME/Drive}
bin="$DOCDRIVE_REPO/.build/release/docdrive"
[ -x "$bin" ] || bin="$DOCDRIVE_REPO/.build/debug/docdrive"
if [ ! -x "$bin" ]; then
    # No binary: still unmount, with the system's tool.
    exec fusermount3 -u "$mountpoint"
fi
exec "$bin" unmount "$mountpoint"
