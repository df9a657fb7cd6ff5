#!/usr/bin/env bash
# fsbench.sh: DocDrive against a native folder and mergerfs, on the same disk, in one run.
#
#   sudo Benchmarks/fsbench.sh [--quick] [--rounds N] [--keep] [--bin PATH] [--dir PATH] [--nofile N]
#
# Mounts three targets under one temporary folder (so all three sit on the same disk):
#   native    a plain folder
#   mergerfs  Debian's mergerfs, default options, over one branch folder
#   docdrive  a DocDrive mount with one store ("Bench") whose remote is a `folder`
# and runs every workload on every target, interleaved (native mergerfs docdrive,
# native mergerfs docdrive, ...), for N rounds (default 7, 3 with --quick). It prints the median of
# each target, the ratios DocDrive/native and DocDrive/mergerfs, and writes them
# with the raw numbers to Benchmarks/results/last-{quick,full}.{md,json}.
#
# Options:
#   --quick       small sizes, for development (< 3 minutes)
#   --rounds N    rounds of every workload (default 7; 3 with --quick)
#   --keep        keep the temporary folder (the mounts are always removed)
#   --bin PATH    the docdrive binary (default: build release, use .build/release/docdrive)
#   --dir PATH    where to make the temporary folder (default /var/tmp)
#   --only LIST   run only these workloads (comma-separated: seq,rand,meta,tree,small,parallel,list;
#                 default all)
#   --targets L   run on these targets only (space- or comma-separated, of: native mergerfs
#                 docdrive; default all three)
#   --uring M     DocDrive's requests: "on" (default) turns on FUSE over io_uring (the fuse
#                 module's enable_uring, put back at the end) as mount-scripts/mount.sh does;
#                 "off" keeps them on /dev/fuse (DOCDRIVE_FUSE_URING=0)
#   --nofile N    raise the open-files limit (soft and hard) to N before starting the
#                 daemons, like a stock systemd system (default 1048576; 0 = leave it)
#   --ext4-image GB  run on a fresh ext4 with a journal (mkfs.ext4 defaults) in a sparse
#                 image file of GB GiB under --dir, mounted through a loop device, instead of
#                 in --dir itself: the same disk, without the quirks of the disk's own file
#                 system (an ext4 without a journal searches past every inode deleted in the
#                 last minutes at each create). Removed at the end.
#
# Needs root (to drop caches), fio, mergerfs (installed with apt-get when missing),
# python3, fusermount3, tar. Every step that touches a mount runs under `timeout`;
# the EXIT/INT/TERM trap unmounts both FUSE mounts, stops only the daemons this
# script started and removes the temporary folder.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
HELPER="$HERE/fsbench.py"

MODE=full
ROUNDS=
KEEP=0
BIN=""
BASE=/var/tmp
NOFILE=1048576
EXT4_GB=""
IMG_DIR=""       # the image's folder (--ext4-image): image file and mount point
ONLY=seq,rand,meta,tree,small,parallel,list
TARGETS_ARG=""
URING=on
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_BEFORE=""
TRANSPORT="not mounted"

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --quick) MODE=quick ;;
        --rounds) ROUNDS="${2:-}"; shift ;;
        --rounds=*) ROUNDS="${1#*=}" ;;
        --keep) KEEP=1 ;;
        --bin) BIN="${2:-}"; shift ;;
        --bin=*) BIN="${1#*=}" ;;
        --dir) BASE="${2:-}"; shift ;;
        --dir=*) BASE="${1#*=}" ;;
        --only) ONLY="${2:-}"; shift ;;
        --only=*) ONLY="${1#*=}" ;;
        --targets) TARGETS_ARG="${2:-}"; shift ;;
        --targets=*) TARGETS_ARG="${1#*=}" ;;
        --uring) URING="${2:-}"; shift ;;
        --uring=*) URING="${1#*=}" ;;
        --nofile) NOFILE="${2:-}"; shift ;;
        --nofile=*) NOFILE="${1#*=}" ;;
        --ext4-image) EXT4_GB="${2:-}"; shift ;;
        --ext4-image=*) EXT4_GB="${1#*=}" ;;
        -h|--help) usage; exit 0 ;;
        *) echo "fsbench: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
case "$URING" in on|off) ;; *) echo "fsbench: --uring is on or off, not $URING" >&2; exit 64 ;; esac
if [ -z "$ROUNDS" ]; then
    # This VM's run-to-run spread is wide: seven rounds give steadier medians in a full run.
    if [ "$MODE" = quick ]; then ROUNDS=3; else ROUNDS=7; fi
fi
case "$ROUNDS" in *[!0-9]*|0) echo "fsbench: --rounds needs a positive number" >&2; exit 64 ;; esac
case "$NOFILE" in ''|*[!0-9]*) echo "fsbench: --nofile needs a number" >&2; exit 64 ;; esac
case "$EXT4_GB" in *[!0-9]*|0) echo "fsbench: --ext4-image needs a size in GiB" >&2; exit 64 ;; esac

if [ "$MODE" = quick ]; then
    SEQ_MB=256; RAND_MB=64; META_N=2000; SMALL_N=2000; LIST_N=20000
    COLD_RT=2; WARM_RT=2; STEP_TMO=300; UPLOAD_IDLE=10; UPLOAD_CAP=60
    TREE_PARTS="include/linux include/c++ include/x86_64-linux-gnu include/X11 include/python3* include/openssl"
else
    SEQ_MB=1024; RAND_MB=256; META_N=10000; SMALL_N=2000; LIST_N=100000
    COLD_RT=5; WARM_RT=5; STEP_TMO=600; UPLOAD_IDLE=10; UPLOAD_CAP=120
    TREE_PARTS="include"
fi
SMALL_SIZE=4096
TARGETS="native mergerfs docdrive"
if [ -n "$TARGETS_ARG" ]; then
    TARGETS=$(echo "$TARGETS_ARG" | tr ',' ' ')
    for t in $TARGETS; do
        case "$t" in native|mergerfs|docdrive) ;; *) echo "fsbench: unknown target $t" >&2; exit 64 ;; esac
    done
fi

T0=$(date +%s.%N)
elapsed() { awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN { printf "%.1f", a - b }'; }
log() { printf '[%6ss] %s\n' "$(elapsed)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ----------------------------------------------------------------------------- state + cleanup
W=""             # the temporary folder
STEP_PID=""      # the running step (a `timeout` process)
MFS_PID=""       # the mergerfs we started (foreground process)
DD_PID=""        # the DocDrive daemon we started
DD_STARTED=0
CLEANED=0
DROP_OK=1
NOTES=()

mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }

# Abort a FUSE connection (unblocks anything stuck on a hung daemon).
fuse_abort() {
    local minor
    minor=$(awk -v m="$1" '$5 == m { split($3, a, ":"); print a[2]; exit }' /proc/self/mountinfo)
    if [ -n "$minor" ] && [ -w "/sys/fs/fuse/connections/$minor/abort" ]; then
        echo 1 > "/sys/fs/fuse/connections/$minor/abort" 2>/dev/null || true
    fi
}

# Stop a process we started: only if it is alive and its command line holds $2.
stop_pid() {
    local pid=$1 mark=$2 i
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$mark" || return 0
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 50); do [ -d "/proc/$pid" ] || return 0; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
    sleep 0.2
}

unmount_docdrive() {
    mounted "$DD_MNT" || { stop_pid "$DD_PID" "$DD_HOME"; return 0; }
    DOCDRIVE_HOME="$DD_HOME" timeout -k 5 35 "$BIN" unmount "$DD_MNT" --timeout 25 >/dev/null 2>&1
    if mounted "$DD_MNT"; then
        log "docdrive unmount failed; aborting the connection and detaching lazily"
        fuse_abort "$DD_MNT"
        timeout -k 5 20 fusermount3 -uz "$DD_MNT" 2>/dev/null
    fi
    stop_pid "$DD_PID" "$DD_HOME"
    DD_PID=""
}

unmount_mergerfs() {
    if mounted "$MFS_MNT"; then
        timeout -k 5 30 fusermount3 -u "$MFS_MNT" 2>/dev/null
        if mounted "$MFS_MNT"; then
            log "mergerfs unmount failed; aborting the connection and detaching lazily"
            fuse_abort "$MFS_MNT"
            timeout -k 5 20 fusermount3 -uz "$MFS_MNT" 2>/dev/null
        fi
    fi
    # mergerfs -f exits once unmounted; give it a moment, then make sure.
    local i
    for i in $(seq 25); do [ -n "$MFS_PID" ] && [ -d "/proc/$MFS_PID" ] || break; sleep 0.2; done
    stop_pid "$MFS_PID" "$MFS_MNT"
    MFS_PID=""
}

cleanup() {
    [ "$CLEANED" = 1 ] && return
    CLEANED=1
    trap '' INT TERM
    set +e
    if [ -n "$STEP_PID" ] && [ -d "/proc/$STEP_PID" ]; then
        kill -TERM "$STEP_PID" 2>/dev/null
        sleep 1
        kill -KILL "$STEP_PID" 2>/dev/null
    fi
    [ -n "$URING_BEFORE" ] && echo "$URING_BEFORE" > "$URING_PARAM"
    [ -n "$W" ] || { remove_image 0; return; }
    [ "$DD_STARTED" = 1 ] && unmount_docdrive
    [ -n "${MFS_MNT:-}" ] && unmount_mergerfs
    # Anything else still mounted under our folder goes too.
    local m left=0
    for m in $(awk -v w="$W/" 'index($2, w) == 1 { print $2 }' /proc/mounts); do
        fuse_abort "$m"; timeout -k 5 20 fusermount3 -uz "$m" 2>/dev/null || timeout -k 5 20 umount -l "$m" 2>/dev/null
    done
    if awk -v w="$W/" 'index($2, w) == 1 { f = 1 } END { exit !f }' /proc/mounts; then
        left=1
        log "WARNING: mounts remain under $W; not removing it:"
        awk -v w="$W/" 'index($2, w) == 1' /proc/mounts >&2
    fi
    if [ "$KEEP" = 1 ]; then
        log "kept $W"
    elif [ "$left" = 0 ] && [ -z "$IMG_DIR" ]; then
        timeout -k 5 600 rm -rf --one-file-system "$W"
    fi
    remove_image "$left"
}

# The --ext4-image file system goes whole (nothing in it is deleted file by file), unless
# mounts remain in it ($1 = 1) or --keep.
remove_image() {
    [ -n "$IMG_DIR" ] && [ "$1" = 0 ] || return 0
    if [ "$KEEP" = 1 ]; then log "kept $IMG_DIR (mounted at $IMG_DIR/mnt)"; return 0; fi
    if mounted "$IMG_DIR/mnt"; then
        timeout -k 5 60 umount "$IMG_DIR/mnt" || { log "WARNING: cannot unmount $IMG_DIR/mnt; not removing $IMG_DIR"; return 0; }
    fi
    rm -rf --one-file-system "$IMG_DIR"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# Run one step under timeout, in the background so a signal reaches the trap at once.
# Its stdout goes to $STEP_OUT, its stderr to $STEP_ERR.
run_step() {
    local name=$1 rc
    shift
    timeout -k 10 "$STEP_TMO" "$@" > "$STEP_OUT" 2> "$STEP_ERR" &
    STEP_PID=$!
    wait "$STEP_PID"
    rc=$?
    STEP_PID=""
    if [ "$rc" != 0 ]; then
        [ "$rc" = 124 ] && log "step '$name' timed out after $STEP_TMO s"
        log "step '$name' failed (exit $rc): $*"
        tail -n 20 "$STEP_ERR" >&2
        tail -n 5 "$STEP_OUT" >&2
        exit 1
    fi
}
kv() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" "$STEP_OUT" | tail -n 1; }
rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$RAW"; }
rate() { echo "$1 $2" | awk '{ printf "%.1f", $1 / $2 }'; }
# CPU time (user + system, clock ticks) of a target's daemon so far; empty for native. In the
# VM's noise the daemon's CPU per operation is steadier than the rates, and it is what two
# CPUs' worth of writers run out of (README, "Where a create's time goes").
cpu_ticks() {
    local pid=""
    case "$1" in mergerfs) pid=$MFS_PID ;; docdrive) pid=$DD_PID ;; esac
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 0
    # Fields 14 and 15 after the command name (which may hold spaces) closes with ")".
    sed 's/.*) //' "/proc/$pid/stat" | awk '{ print $12 + $13 }'
}
per_op_us() {  # per_op_us TICKS_BEFORE TICKS_AFTER OPS
    [ -n "$1" ] && [ -n "$2" ] || return 0
    echo "$1 $2 $3 $(getconf CLK_TCK)" | awk '{ printf "%.1f", ($2 - $1) * 1000000 / $4 / $3 }'
}

drop() {  # drop 3 = page cache + dentries + inodes; drop 2 = dentries + inodes
    timeout -k 5 120 sync || log "sync timed out"
    if ! ( echo "$1" > /proc/sys/vm/drop_caches ) 2>/dev/null; then
        if [ "$DROP_OK" = 1 ]; then
            log "WARNING: cannot write /proc/sys/vm/drop_caches (not root?); 'cold' numbers are not cold"
            NOTES+=("Dropping caches failed: the cold and dropped-dentry numbers are warm.")
        fi
        DROP_OK=0
    fi
}

# Before each workload on each target: write everything back, drop the caches, and wait
# (at most 5 s) until the disk has no requests in flight (deletes on a `discard` mount
# trim later). Dropping matters on an ext4 without a journal: its inode allocator then
# skips inodes deleted in the last 60-360 s whose inode-table block is still cached
# (fs/ext4/ialloc.c, recently_deleted), which makes every create after a mass delete
# slower, and slower for whichever target runs later in the round.
settle() {
    drop 3
    [ -r "$INFLIGHT" ] || return 0
    local i
    for i in $(seq 50); do
        [ "$(awk '{ print $1 + $2 }' "$INFLIGHT")" = 0 ] && return 0
        sleep 0.1
    done
}

# DocDrive uploads every file saved in its store after the write-back delay. Those uploads
# read the new files (which warms the page cache) and write their copies to the same disk:
# they must not run while another target is measured, nor during a "cold" read of
# DocDrive's own. `docdrive sync` waits until the queue is empty.
uploads_done() {
    DOCDRIVE_HOME="$DD_HOME" timeout -k 5 150 "$BIN" sync --timeout 120 > /dev/null 2>&1 \
        || log "WARNING: DocDrive's uploads did not finish within 120 s"
}

tdir() {
    case "$1" in
        native) echo "$NATIVE" ;;
        mergerfs) echo "$MFS_MNT" ;;
        docdrive) echo "$DD_MNT/Bench" ;;
    esac
}

# ----------------------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || log "WARNING: not root; dropping caches will fail"
need=()
command -v fio >/dev/null || need+=(fio)
command -v mergerfs >/dev/null || need+=(mergerfs)
command -v fusermount3 >/dev/null || need+=(fuse3)
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get install -y -q "${need[@]}" >/dev/null 2>&1 \
        || { timeout 600 apt-get update -q >/dev/null 2>&1 && timeout 600 apt-get install -y -q "${need[@]}" >/dev/null; } \
        || die "cannot install ${need[*]}"
fi
PY=$(python3 -c 'import sys; print(sys.executable)') || die "python3 is needed"
for c in fio mergerfs fusermount3 tar du; do command -v "$c" >/dev/null || die "$c is missing"; done

if [ -z "$BIN" ]; then
    log "building DocDrive (swift build -c release)"
    ( cd "$REPO" && timeout 3600 swift build -c release ) > /tmp/fsbench-build.$$.log 2>&1 \
        || { tail -n 30 /tmp/fsbench-build.$$.log >&2; rm -f /tmp/fsbench-build.$$.log; die "the release build failed"; }
    rm -f /tmp/fsbench-build.$$.log
    log "built"
    BIN="$REPO/.build/release/docdrive"
fi
BIN=$(realpath "$BIN" 2>/dev/null) && [ -x "$BIN" ] || die "no docdrive binary at ${BIN:-?}"

T0=$(date +%s.%N)   # the benchmark's runtime starts here (the build is not counted)

# DocDrive keeps one descriptor per inode the kernel knows, so listing a big tree needs
# a high open-files limit; stock systemd gives processes a hard limit of 524288 or more.
if [ "$NOFILE" != 0 ]; then
    nr_open=$(cat /proc/sys/fs/nr_open 2>/dev/null || echo "$NOFILE")
    [ "$NOFILE" -gt "$nr_open" ] && NOFILE=$nr_open
    if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$NOFILE" ]; then
        ulimit -Hn "$NOFILE" 2>/dev/null || log "cannot raise the hard open-files limit to $NOFILE (it stays $(ulimit -Hn))"
    fi
    ulimit -Sn "$(ulimit -Hn)" 2>/dev/null
fi

# ----------------------------------------------------------------------------- set-up
mkdir -p "$BASE" || die "cannot create $BASE"
if [ -n "$EXT4_GB" ]; then
    IMG_DIR=$(mktemp -d "$(realpath "$BASE")/fsbench-ext4.XXXXXX") || die "cannot create a folder under $BASE"
    IMG_DISK=$(df --output=source,fstype "$IMG_DIR" | tail -n 1 | tr -s ' ')
    truncate -s "${EXT4_GB}G" "$IMG_DIR/ext4.img" && mkfs.ext4 -q -F "$IMG_DIR/ext4.img" \
        || die "cannot make an ext4 file system in $IMG_DIR/ext4.img"
    mkdir "$IMG_DIR/mnt" && mount -o loop "$IMG_DIR/ext4.img" "$IMG_DIR/mnt" || die "cannot mount $IMG_DIR/ext4.img"
    BASE="$IMG_DIR/mnt"
    NOTES+=("Run on a fresh ${EXT4_GB} GiB ext4 with a journal (mkfs.ext4 defaults) in an image file on $IMG_DISK, through a loop device (--ext4-image).")
fi
W=$(mktemp -d "$(realpath "$BASE")/fsbench.XXXXXX") || die "cannot create a folder under $BASE"
chmod 755 "$W"
STEP_OUT="$W/step.out"; STEP_ERR="$W/step.err"; RAW="$W/raw.tsv"; : > "$RAW"
NATIVE="$W/native"
MFS_BRANCH="$W/mergerfs-branch"; MFS_MNT="$W/mergerfs"
DD_HOME="$W/docdrive-home"; DD_REMOTE="$W/docdrive-remote"; DD_MNT="$W/docdrive"
mkdir -p "$NATIVE" "$MFS_BRANCH" "$MFS_MNT" "$DD_REMOTE" "$DD_MNT"
# A private copy, so a rebuild during the run does not change the binary under us: `docdrive`
# and the full program it runs for every command but plain queries, `docdrive-full`, beside it.
BIN_ORIG="$BIN"
mkdir -p "$W/bin" && cp "$BIN" "$W/bin/docdrive" && BIN="$W/bin/docdrive" || die "cannot copy $BIN"
if [ -e "$(dirname "$BIN_ORIG")/docdrive-full" ]; then
    cp "$(dirname "$BIN_ORIG")/docdrive-full" "$W/bin/" || die "cannot copy docdrive-full"
fi
DEV=$(df --output=source "$W" | tail -n 1)
INFLIGHT="/sys/class/block/$(basename "$DEV")/inflight"
if [ "$(cat "/sys/fs/ext4/$(basename "$DEV")/journal_task" 2>/dev/null)" = "<none>" ]; then
    NOTES+=("The disk ($DEV) is ext4 without a journal: without the cache drop before each workload, creates after mass deletes were several times slower (ext4 recently_deleted scan), most for the target run last.")
fi
log "mode $MODE, $ROUNDS rounds, in $W ($(df --output=source,fstype "$W" | tail -n 1 | tr -s ' '))"

start_mergerfs() {
    mergerfs -f "$MFS_BRANCH" "$MFS_MNT" > "$W/mergerfs.log" 2>&1 &
    MFS_PID=$!
    local i
    for i in $(seq 100); do
        mounted "$MFS_MNT" && return 0
        [ -d "/proc/$MFS_PID" ] || break
        sleep 0.1
    done
    cat "$W/mergerfs.log" >&2
    die "mergerfs did not mount"
}

start_docdrive() {
    DD_STARTED=1
    DOCDRIVE_HOME="$DD_HOME" timeout -k 5 90 "$BIN" mount "$DD_MNT" --timeout 60 > "$W/dd-mount.out" 2>&1 \
        || { cat "$W/dd-mount.out" >&2; die "docdrive mount failed"; }
    DD_PID=$("$PY" "$HELPER" mountpid "$DD_HOME/run/mount.json") || die "no daemon pid in $DD_HOME/run/mount.json"
    mounted "$DD_MNT" || die "docdrive says it mounted, but $DD_MNT is not in /proc/mounts"
    timeout 10 test -d "$DD_MNT/Bench" || die "the store folder $DD_MNT/Bench is missing"
    # The rings are set up just after INIT: their log line may come a moment later.
    local i
    for i in $(seq 50); do
        if grep -q "requests come through io_uring" "$DD_HOME/run/daemon.log"; then TRANSPORT="io_uring"; break; fi
        if [ "$URING" = off ] || grep -q "io_uring:" "$DD_HOME/run/daemon.log"; then TRANSPORT="/dev/fuse"; break; fi
        sleep 0.1
    done
    [ "$TRANSPORT" = "not mounted" ] && TRANSPORT="/dev/fuse"
    [ "$URING" = on ] && [ "$TRANSPORT" != io_uring ] && die "--uring on, but the daemon's requests come through /dev/fuse: $(grep -i uring "$DD_HOME/run/daemon.log" | tail -n 1)"
}

if [ "$URING" = on ]; then
    [ -e "$URING_PARAM" ] || die "--uring on: this kernel has no FUSE over io_uring ($URING_PARAM); run with --uring off"
    URING_BEFORE=$(cat "$URING_PARAM")
    echo Y > "$URING_PARAM" || die "cannot turn on $URING_PARAM"
else
    export DOCDRIVE_FUSE_URING=0
fi

start_mergerfs
export DOCDRIVE_HOME="$DD_HOME"
"$BIN" init > /dev/null || die "docdrive init failed"
"$BIN" store add bench --name Bench --folder "$DD_REMOTE" > /dev/null || die "docdrive store add failed"
unset DOCDRIVE_HOME
start_docdrive
log "mounted mergerfs (pid $MFS_PID) and DocDrive (daemon pid $DD_PID)"

TARBALL="$W/tree.tar"
# shellcheck disable=SC2086
( cd /usr && tar -cf "$TARBALL" $TREE_PARTS ) 2>/dev/null || [ -s "$TARBALL" ] || die "cannot make the tarball of /usr/include"
TREE_FILES=$(tar -tf "$TARBALL" | wc -l)
TREE_MB=$(( $(stat -c %s "$TARBALL") / 1000000 ))
log "tarball: $TREE_FILES entries, $TREE_MB MB ($TREE_PARTS)"

# ----------------------------------------------------------------------------- workloads
FIO_COMMON=(--ioengine=psync --fallocate=none --invalidate=0 --output-format=json --output="$W/fio.json")

wl_seq() {  # target round
    local t=$1 r=$2 f w rd w4
    f="$(tdir "$t")/seq.dat"
    run_step "seq write $t" fio --name=seqwrite --filename="$f" --rw=write --bs=1M --size="${SEQ_MB}M" \
        --end_fsync=1 "${FIO_COMMON[@]}"
    w=$("$PY" "$HELPER" fio "$W/fio.json" write mbps) || die "cannot read fio's output"
    if [ "$t" = docdrive ]; then uploads_done; fi
    drop 3
    run_step "seq read $t" fio --name=seqread --filename="$f" --rw=read --bs=1M --size="${SEQ_MB}M" "${FIO_COMMON[@]}"
    rd=$("$PY" "$HELPER" fio "$W/fio.json" read mbps) || die "cannot read fio's output"
    run_step "rm $t" rm -f "$f"
    # Small writes (a log, sqlite's pages, a compiler's output): every write(2) of 4 KiB. On FUSE
    # each one can cost a round trip to the daemon even when the data goes elsewhere.
    run_step "seq write 4k $t" fio --name=seqwrite4k --filename="$f" --rw=write --bs=4k --size="${RAND_MB}M" \
        --end_fsync=1 "${FIO_COMMON[@]}"
    w4=$("$PY" "$HELPER" fio "$W/fio.json" write mbps) || die "cannot read fio's output"
    run_step "rm $t" rm -f "$f"
    rec seq_write "$t" "$r" "$w"; rec seq_read "$t" "$r" "$rd"; rec seq_write_4k "$t" "$r" "$w4"
    log "r$r seq     $t: write $w MB/s, read $rd MB/s, write in 4 KiB writes $w4 MB/s"
}

wl_rand() {
    local t=$1 r=$2 f c wm
    f="$(tdir "$t")/rand.dat"
    run_step "rand layout $t" fio --name=layout --filename="$f" --rw=write --bs=1M --size="${RAND_MB}M" \
        --end_fsync=1 "${FIO_COMMON[@]}"
    if [ "$t" = docdrive ]; then uploads_done; fi
    drop 3
    # Cold: each block at most once (fio's random map), capped in time.
    run_step "rand cold $t" fio --name=randcold --filename="$f" --rw=randread --bs=4k --size="${RAND_MB}M" \
        --runtime="$COLD_RT" "${FIO_COMMON[@]}"
    c=$("$PY" "$HELPER" fio "$W/fio.json" read iops) || die "cannot read fio's output"
    run_step "rand warm-up $t" fio --name=warmup --filename="$f" --rw=read --bs=1M --size="${RAND_MB}M" "${FIO_COMMON[@]}"
    run_step "rand warm $t" fio --name=randwarm --filename="$f" --rw=randread --bs=4k --size="${RAND_MB}M" \
        --time_based --runtime="$WARM_RT" "${FIO_COMMON[@]}"
    wm=$("$PY" "$HELPER" fio "$W/fio.json" read iops) || die "cannot read fio's output"
    run_step "rm $t" rm -f "$f"
    rec rand_cold "$t" "$r" "$c"; rec rand_warm "$t" "$r" "$wm"
    log "r$r random  $t: cold $c IOPS, warm $wm IOPS"
}

wl_meta() {
    local t=$1 r=$2 d cr cc c0 st sw rd rw ul n
    d="$(tdir "$t")/meta"
    run_step "mkdir $t" mkdir "$d"
    c0=$(cpu_ticks "$t")
    run_step "create $t" "$PY" "$HELPER" create "$d" "$META_N"; cr=$(kv rate)
    cc=$(per_op_us "$c0" "$(cpu_ticks "$t")" "$META_N")
    drop 2
    run_step "stat $t" "$PY" "$HELPER" stat "$d" "$META_N"; st=$(kv rate)
    # Warm: the same stats 2 s later, past a 1 s entry and attribute timeout (what a second
    # `git status` or `make` does): the kernel answers them only if it was told to keep them.
    sleep 2
    run_step "stat warm $t" "$PY" "$HELPER" stat "$d" "$META_N"; sw=$(kv rate)
    drop 2
    run_step "readdir $t" "$PY" "$HELPER" time -- sh -c "ls -f '$d' | wc -l"
    n=$(kv result); [ "$n" = $((META_N + 2)) ] || die "readdir on $t saw $n entries, expected $((META_N + 2))"
    rd=$(rate "$META_N" "$(kv seconds)")
    # Warm: the same listing again, once untimed, then 10 times in a row (timed together); the
    # counts of the 10 must all be the whole folder.
    run_step "readdir warm-up $t" sh -c "ls -f '$d' | wc -l"
    run_step "readdir warm $t" "$PY" "$HELPER" time -- \
        sh -c "for i in 1 2 3 4 5 6 7 8 9 10; do ls -f '$d' | wc -l; done | sort -u | paste -sd+"
    n=$(kv result); [ "$n" = $((META_N + 2)) ] || die "warm readdir on $t saw $n entries, expected $((META_N + 2)) every time"
    rw=$(rate $((10 * META_N)) "$(kv seconds)")
    run_step "unlink $t" "$PY" "$HELPER" unlink "$d" "$META_N"; ul=$(kv rate)
    run_step "rmdir $t" rmdir "$d"
    rec meta_create "$t" "$r" "$cr"; [ -z "$cc" ] || rec meta_create_cpu "$t" "$r" "$cc"; rec meta_stat "$t" "$r" "$st"; rec meta_stat_warm "$t" "$r" "$sw"
    rec meta_readdir "$t" "$r" "$rd"; rec meta_readdir_warm "$t" "$r" "$rw"; rec meta_unlink "$t" "$r" "$ul"
    log "r$r meta    $t: create $cr${cc:+ ($cc µs of daemon CPU each)}, stat $st (2 s later $sw), readdir $rd (warm $rw), unlink $ul files/s"
}

wl_tree() {
    local t=$1 r=$2 d x u m
    d="$(tdir "$t")/tree"
    run_step "mkdir $t" mkdir "$d"
    cat "$TARBALL" > /dev/null   # the tarball itself comes from the page cache for every target
    run_step "tar x $t" "$PY" "$HELPER" time -- tar -xf "$TARBALL" -C "$d" --no-same-owner; x=$(kv seconds)
    drop 2
    run_step "du $t" "$PY" "$HELPER" time -- du -s "$d"; u=$(kv seconds)
    run_step "rm -rf $t" "$PY" "$HELPER" time -- rm -rf "$d"; m=$(kv seconds)
    rec tree_tarx "$t" "$r" "$x"; rec tree_du "$t" "$r" "$u"; rec tree_rm "$t" "$r" "$m"
    log "r$r tree    $t: tar x $x s, du $u s, rm -rf $m s"
}

UPLOADS=unknown   # unknown | none (no uploads seen: skip the wait later) | yes
wl_small() {
    local t=$1 r=$2 d wr last st up=""
    d="$(tdir "$t")/small-r$r"
    run_step "mkdir $t" mkdir "$d"
    run_step "small files $t" "$PY" "$HELPER" smallfiles "$d" "$SMALL_N" "$SMALL_SIZE"
    wr=$(kv rate); last=$(kv lastclose)
    rec small_write "$t" "$r" "$wr"
    if [ "$t" = docdrive ]; then
        if [ "$UPLOADS" = none ]; then
            up="n/a (no uploads yet)"
        else
            run_step "wait for the remote" "$PY" "$HELPER" waitremote "$DD_REMOTE" "$SMALL_N" "$SMALL_SIZE" \
                "$last" "$UPLOAD_IDLE" "$UPLOAD_CAP"
            st=$(kv status)
            case "$st" in
                ok) up=$(kv seconds); UPLOADS=yes ;;
                none) up="n/a (no uploads yet)"; UPLOADS=none
                      NOTES+=("No file reached the remote within ${UPLOAD_IDLE} s of the last close: uploads are not implemented yet (checked in round $r; later rounds skip the wait).") ;;
                *) up="incomplete ($(kv count)/$SMALL_N after $(kv seconds) s)" ;;
            esac
        fi
        rec small_upload "$t" "$r" "$up"
    fi
    run_step "rm small $t" rm -rf "$d"
    log "r$r small   $t: $wr files/s${up:+, on the remote: $up}"
}

# Parallel writers: 1, 2, 4, 8 processes, each writing SMALL_N files of 4 KiB (open, write,
# close) in its own folder, started together; the aggregate files per second. DocDrive's
# uploads of one step finish before the next (they would compete with it for the 2 CPUs).
# The steps' files are removed only after the last step: on ext4 without a journal (this
# VM's disk) a create skips every inode deleted in the last 60-360 s (`recently_deleted`),
# so a step right after the removal of the one before measured that skip (native fell from
# 15,738 files/s at 1 writer to 7,590 at 2 on 2026-11-27, and every target dipped at 2).
wl_parallel() {
    local t=$1 r=$2 d k wr all="" made=()
    for k in 1 2 4 8; do
        settle
        d="$(tdir "$t")/par-r$r-w$k"
        run_step "mkdir $t" mkdir "$d"
        made+=("$d")
        run_step "parallel $k $t" "$PY" "$HELPER" parallel "$d" "$k" "$SMALL_N" "$SMALL_SIZE"
        wr=$(kv rate)
        rec "par_w$k" "$t" "$r" "$wr"
        all+="$k: $wr, "
        if [ "$t" = docdrive ]; then uploads_done; fi
    done
    run_step "rm parallel $t" rm -rf "${made[@]}"
    if [ "$t" = docdrive ]; then uploads_done; fi
    log "r$r parallel $t: ${all%, } files/s"
}

# ----------------------------------------------------------------------------- rounds
# The order of the targets turns by one each round (native mergerfs docdrive, then mergerfs
# docdrive native, ...): every target follows each other one equally often. The disk keeps a
# memory of the last target's work (ext4 skips recently deleted inodes when it allocates, the
# write-back of its files goes on), and a fixed order would hand the same neighbour's to the
# same target every round.
order_of_round() {  # round -> the targets in the order of that round
    local -a t=($TARGETS)
    local n=${#t[@]} k i out=""
    k=$(( ($1 - 1) % n ))
    for i in $(seq 0 $((n - 1))); do out+="${t[$(( (k + i) % n ))]} "; done
    echo "$out"
}
for r in $(seq "$ROUNDS"); do
    for wl in seq rand meta tree small parallel; do
        case ",$ONLY," in *",$wl,"*) ;; *) continue ;; esac
        for t in $(order_of_round "$r"); do
            settle
            "wl_$wl" "$t" "$r"
            if [ "$t" = docdrive ]; then uploads_done; fi
        done
    done
done

# ----------------------------------------------------------------------------- memory + listing
mem() {  # pid -> "hwm rss" in MB
    "$PY" "$HELPER" mem "$1" > "$STEP_OUT" || die "cannot read /proc/$1/status"
    echo "$(kv hwm) $(kv rss)"
}
m=$(mem "$DD_PID") || exit 1; read -r DD_HWM1 _ <<< "$m"
m=$(mem "$MFS_PID") || exit 1; read -r MFS_HWM1 _ <<< "$m"
log "after the rounds: peak RSS docdrive $DD_HWM1 MB, mergerfs $MFS_HWM1 MB"

case ",$ONLY," in *,list,*)
    # The trees are made straight in the backing folders while the daemons are stopped:
    # creating through the mount is measured above; this is about listing what is there.
    # Fresh daemons afterwards, so the RSS after the listing is what listing costs.
    unmount_docdrive
    unmount_mergerfs
    DD_CACHE="$DD_HOME/stores/bench/cache"
    [ -d "$DD_CACHE" ] || die "no DocDrive backing folder at $DD_CACHE"
    for dir in "$NATIVE" "$MFS_BRANCH" "$DD_CACHE"; do
        run_step "make the $LIST_N-file tree in $dir" "$PY" "$HELPER" mktree "$dir/list" "$LIST_N" 1000
    done
    log "made the $LIST_N-file trees ($(kv rate) files/s)"
    start_mergerfs
    start_docdrive
    LIMIT_DD=$(awk '/Max open files/ { print $4 " soft, " $5 " hard" }' "/proc/$DD_PID/limits")
    NOTES+=("The DocDrive daemon's open-files limit: $LIMIT_DD (see --nofile).")
    log "remounted: mergerfs pid $MFS_PID, DocDrive daemon pid $DD_PID (open files: $LIMIT_DD)"
    drop 3
    LIST_FAILED=""
    for t in $TARGETS; do
        run_step "list $t" "$PY" "$HELPER" walk "$(tdir "$t")/list"
        n=$(kv count); want=$((LIST_N + (LIST_N + 999) / 1000))
        if [ "$(kv status)" != ok ]; then
            rec list_walk "$t" 1 "failed: $(kv error | tr '_' ' ') after $n entries"
            NOTES+=("Listing the tree on $t failed after $n of $want entries: $(kv error | tr '_' ' ').")
            [ "$t" = docdrive ] && LIST_FAILED=1
            log "listing on $t FAILED after $n entries: $(kv error | tr '_' ' ')"
            continue
        fi
        if [ "$n" != "$want" ]; then
            rec list_walk "$t" 1 "failed: saw $n of $want entries, no error"
            NOTES+=("Listing the tree on $t returned $n of $want entries without any error.")
            [ "$t" = docdrive ] && LIST_FAILED=1
            log "listing on $t INCOMPLETE: $n of $want entries, no error"
            continue
        fi
        rec list_walk "$t" 1 "$(kv seconds)"
        log "listed $n entries on $t in $(kv seconds) s"
    done
    m=$(mem "$DD_PID") || exit 1; read -r DD_HWM2 DD_RSS <<< "$m"
    m=$(mem "$MFS_PID") || exit 1; read -r MFS_HWM2 MFS_RSS <<< "$m"
    maxf() { echo "$1 $2" | awk '{ print ($1 > $2 ? $1 : $2) }'; }
    rec mem_hwm docdrive 1 "$(maxf "$DD_HWM1" "$DD_HWM2")"; rec mem_hwm mergerfs 1 "$(maxf "$MFS_HWM1" "$MFS_HWM2")"
    if [ -n "$LIST_FAILED" ]; then
        rec mem_list docdrive 1 "n/a (listing failed; $DD_RSS at the failure)"
    else
        rec mem_list docdrive 1 "$DD_RSS"
    fi
    rec mem_list mergerfs 1 "$MFS_RSS"
    log "after listing: RSS docdrive $DD_RSS MB, mergerfs $MFS_RSS MB"
    ;;
*)
    rec mem_hwm docdrive 1 "$DD_HWM1"; rec mem_hwm mergerfs 1 "$MFS_HWM1" ;;
esac

# ----------------------------------------------------------------------------- report
unmount_docdrive
unmount_mergerfs
RUNTIME=$(elapsed | xargs printf '%.0f')

mkdir -p "$HERE/results"
NOTES+=("Each round runs every workload on every target, interleaved; the order turns by one each round (native mergerfs docdrive, then mergerfs docdrive native, then docdrive native mergerfs), so that no target always follows the same neighbour on the shared disk. Before each workload on each target the caches are dropped ('sync; echo 3 > /proc/sys/vm/drop_caches'), so every workload starts cold (tar x reads its tarball from the page cache); 'echo 2' (dentries and inodes) is dropped again before stat, readdir and du. After every DocDrive workload, and after its sequential write and its random-read file are written, the run waits ('docdrive sync') until DocDrive's uploads are done: they read the new files (warming the page cache) and copy them to the same disk, so they must not overlap another target's measurement nor a cold read. Uploads that DocDrive's own measured steps start (after the creates, tar x, the small files) run during its next steps, as they would for a user.")
NOTES+=("Warm readdir: right after the cold one, one untimed 'ls -f DIR | wc -l', then 10 in a row timed together (files/s = 10 × files / seconds); each of the 10 must count the whole folder.")
NOTES+=("fio: psync engine, queue depth 1, one job, --fallocate=none --invalidate=0; cold random reads touch each block at most once (capped at ${COLD_RT} s), warm random reads run ${WARM_RT} s after a sequential pass over the file, in a new fio process (a new open).")
NOTES+=("The memory rows: peak is VmHWM, the highest over the daemons of the run (DocDrive and mergerfs are restarted before the listing); the listing row is VmRSS of the fresh daemon after a readdir+lstat walk of the tree.")
NOTES+=("The upload check looks for files named like the written ones anywhere under the folder remote ($DD_REMOTE), with the right size.")
export FSB_MODE="$MODE" FSB_ROUNDS="$ROUNDS" FSB_DIR="$W" FSB_BIN="$BIN_ORIG" FSB_RUNTIME="$RUNTIME" FSB_DROP="$DROP_OK" \
    FSB_SEQ="$SEQ_MB" FSB_RAND="$RAND_MB" FSB_META="$META_N" FSB_SMALL="$SMALL_N" FSB_LIST="$LIST_N" \
    FSB_TREE="$TREE_PARTS" FSB_TREE_FILES="$TREE_FILES" FSB_TREE_MB="$TREE_MB" \
    FSB_DISK="$(df --output=source,fstype "$W" | tail -n 1 | tr -s ' ')" \
    FSB_DDVER="$("$BIN" --version 2>/dev/null | head -n 1)" \
    FSB_MFSVER="$(mergerfs --version 2>&1 | head -n 1 | sed 's/.*version: *//')" \
    FSB_FIOVER="$(fio --version)" FSB_TRANSPORT="$TRANSPORT"
printf '%s\n' "${NOTES[@]}" > "$W/notes.txt"
"$PY" - "$W/meta.json" "$W/notes.txt" <<'EOF' || die "cannot write the run's description"
import json, os, platform, sys, time
e = os.environ
def size(mb):
    mb = int(mb)
    return f"{mb // 1024} GiB" if mb % 1024 == 0 else f"{mb} MiB"
meta = {
    "mode": e["FSB_MODE"], "rounds": int(e["FSB_ROUNDS"]), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(), "dir": e["FSB_DIR"],
    "disk": e["FSB_DISK"], "docdrive": f"{e['FSB_BIN']} ({e['FSB_DDVER']})", "mergerfs": e["FSB_MFSVER"],
    "fio": e["FSB_FIOVER"], "transport": e["FSB_TRANSPORT"], "runtime": int(e["FSB_RUNTIME"]), "drop_caches_ok": e["FSB_DROP"] == "1",
    "sizes": {
        "seq": size(e["FSB_SEQ"]), "rand": size(e["FSB_RAND"]), "meta": f"{int(e['FSB_META']):,}",
        "small": f"{int(e['FSB_SMALL']):,}", "list": f"{int(e['FSB_LIST']):,}",
        "tree": f"/usr/{e['FSB_TREE']} ({int(e['FSB_TREE_FILES']):,} entries, {e['FSB_TREE_MB']} MB)"
                if e["FSB_TREE"] == "include" else
                f"a subset of /usr/include ({int(e['FSB_TREE_FILES']):,} entries, {e['FSB_TREE_MB']} MB)",
    },
    "notes": [l for l in open(sys.argv[2]).read().splitlines() if l],
}
json.dump(meta, open(sys.argv[1], "w"), indent=2)
EOF
# A run of some workloads only does not replace the last whole run's results.
OUTNAME="last-$MODE"
[ "$ONLY" = seq,rand,meta,tree,small,parallel,list ] && [ -z "$TARGETS_ARG" ] || OUTNAME="last-$MODE-only"
cp "$RAW" "$HERE/results/$OUTNAME.tsv"
"$PY" "$HELPER" report "$RAW" "$W/meta.json" "$HERE/results/$OUTNAME.md" "$HERE/results/$OUTNAME.json" \
    || die "the report failed"
log "done in $RUNTIME s; results in $HERE/results/$OUTNAME.{md,json,tsv}"
