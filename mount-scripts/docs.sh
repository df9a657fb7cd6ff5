#!/usr/bin/env bash
# docs.sh [BIN]: writes docs/user/commands.md from the command definitions of the built program
# (`docdrive --experimental-dump-help`), for the release build unless BIN (or DOCDRIVE_BIN) names
# another. Run it after changing a command, and commit the result: Tests/mount/test_commands_doc.py
# fails while the committed file differs from what the built program says.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bin=${1:-${DOCDRIVE_BIN:-$DOCDRIVE_REPO/.build/release/docdrive}}
[ -x "$bin" ] || { say "docdrive: no $bin; build first (swift build -c release) or give the binary."; exit 1; }
python3 "$DOCDRIVE_REPO/mount-scripts/commands_md.py" --bin "$bin" --out "$DOCDRIVE_REPO/docs/user/commands.md"
say "Wrote docs/user/commands.md."
