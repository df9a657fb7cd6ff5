#!/usr/bin/env bash
# writers_prof.sh: where the daemon's threads wait on each other with parallel writers.
#
#   sudo Benchmarks/writers_prof.sh PATH/docdrive OUTDIR [WRITERS]; python3 Benchmarks/lockwaits.py OUTDIR...
#
# Mounts one DocDrive (folder store), runs WRITERS (default 8) parallel writers once to warm up,
# then again under `perf record -e syscalls:sys_enter_futex --call-graph fp` (futex.data: a
# Mutex that finds its lock taken calls FUTEX_LOCK_PI), then again under `perf record -g`
# (cycles.data), then unmounts. The binary is copied into OUTDIR so perf finds its symbols.
set -uo pipefail
BIN=$1; OUT=$2; K=${3:-8}
HELPER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fsbench.py
W=$(mktemp -d /var/tmp/locksprof.XXXXXX)
mkdir -p $OUT $W/remote $W/mnt
# docdrive, and docdrive-full beside it (the daemon's program, whose symbols perf needs)
mkdir -p $OUT/bin.d; cp $BIN $OUT/bin.d/docdrive; ln -s $OUT/bin.d/docdrive $W/bin
[ -e "$(dirname $BIN)/docdrive-full" ] && cp "$(dirname $BIN)/docdrive-full" $OUT/bin.d/
export DOCDRIVE_HOME=$W/home
cleanup() { timeout 40 $W/bin unmount $W/mnt --timeout 25 >/dev/null 2>&1 || fusermount3 -uz $W/mnt; rm -rf --one-file-system $W; }
trap cleanup EXIT
ulimit -n $(ulimit -Hn)
$W/bin init >/dev/null && $W/bin store add bench --name Bench --folder $W/remote >/dev/null && timeout 90 $W/bin mount $W/mnt --timeout 60 >/dev/null || exit 1
PID=$(python3 $HELPER mountpid $W/home/run/mount.json)

mkdir $W/mnt/Bench/warm; python3 $HELPER parallel $W/mnt/Bench/warm $K 2000 4096; rm -rf $W/mnt/Bench/warm; timeout 150 $W/bin sync --timeout 120 >/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches
echo "threads: $(ls /proc/$PID/task | wc -l)" > $OUT/info
mkdir $W/mnt/Bench/a
perf record -o $OUT/futex.data -e syscalls:sys_enter_futex --call-graph fp -p $PID -- sleep 1000 2>$OUT/perf1.err &
PP=$!
sleep 1
python3 $HELPER parallel $W/mnt/Bench/a $K 2000 4096 | tee -a $OUT/info
kill -INT $PP; wait $PP
rm -rf $W/mnt/Bench/a; timeout 150 $W/bin sync --timeout 120 >/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches
mkdir $W/mnt/Bench/b
perf record -o $OUT/cycles.data -F 999 -g -p $PID -- sleep 1000 2>$OUT/perf2.err &
PP=$!
sleep 1
python3 $HELPER parallel $W/mnt/Bench/b $K 2000 4096 | tee -a $OUT/info
kill -INT $PP; wait $PP
echo "load $(cat /proc/loadavg)" >> $OUT/info
