#!/usr/bin/env bash
# mount.sh [MOUNTPOINT]: install what is missing, build, create the default drive if there is none, mount.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

mountpoint=${1:-$HOME/Drive}
install_runtime_deps
bin=$(build_release)
install_command "$bin"
"$bin" init --default --if-missing
enable_fuse_uring >/dev/null
set +e
"$bin" mount "$mountpoint"
rc=$?
set -e
case $rc in
    0) say "Unmount with: $(dirname "$0")/unmount.sh $mountpoint" ;;
    7) say "(Nothing to do: see \`$bin status\`.)"; exit 0 ;;   # already mounted
    *) exit $rc ;;
esac
