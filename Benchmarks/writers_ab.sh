#!/usr/bin/env bash
# writers_ab.sh: parallel writers, two (or more) DocDrive builds side by side, interleaved.
#
#   sudo Benchmarks/writers_ab.sh ROUNDS before=PATH/docdrive after=PATH/docdrive > ab.tsv
#   python3 Benchmarks/writers_ab_report.py ab.tsv
#
# Mounts one DocDrive per binary (each with a folder store), then per round and writer count
# (WRITERS, default "1 2 4 8"; FILES per writer, default 2000) runs fsbench.py's parallel step
# on each, the order turning per round, with a cache drop before and `docdrive sync` after each
# step. Needs root and perf. Prints TSV lines: label, round, writers, files/s, load average,
# the daemon's context switches per 1000 files and its CPU microseconds per file (perf stat).
set -uo pipefail
ROUNDS=$1; shift
HELPER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fsbench.py
W=$(mktemp -d /var/tmp/locksab.XXXXXX)
labels=(); bins=()
for a in "$@"; do labels+=("${a%%=*}"); bins+=("${a#*=}"); done
cleanup() {
  for i in "${!labels[@]}"; do
    l=${labels[$i]}
    DOCDRIVE_HOME=$W/$l/home timeout 40 "${bins[$i]}" unmount "$W/$l/mnt" --timeout 25 >/dev/null 2>&1 || fusermount3 -uz "$W/$l/mnt"
  done
  rm -rf --one-file-system "$W"
}
trap cleanup EXIT
ulimit -n 1048576 2>/dev/null || true
for i in "${!labels[@]}"; do
  l=${labels[$i]}; b=${bins[$i]}
  mkdir -p $W/$l/remote $W/$l/mnt
  # docdrive, and docdrive-full beside it (the program it runs for all but plain queries)
  mkdir -p $W/$l/bin; cp "$b" $W/$l/bin/docdrive; bins[$i]=$W/$l/bin/docdrive
  [ -e "$(dirname "$b")/docdrive-full" ] && cp "$(dirname "$b")/docdrive-full" $W/$l/bin/
  export DOCDRIVE_HOME=$W/$l/home
  ${bins[$i]} init >/dev/null && ${bins[$i]} store add bench --name Bench --folder $W/$l/remote >/dev/null \
    && timeout 90 ${bins[$i]} mount $W/$l/mnt --timeout 60 >/dev/null || { echo "mount $l failed" >&2; exit 1; }
  python3 $HELPER mountpid $DOCDRIVE_HOME/run/mount.json > $W/$l/pid
  unset DOCDRIVE_HOME
done
echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
n=${#labels[@]}
for r in $(seq $ROUNDS); do
  for k in ${WRITERS:-1 2 4 8}; do
    for j in $(seq 0 $((n-1))); do
      i=$(( (j + r) % n )); l=${labels[$i]}
      d=$W/$l/mnt/Bench/p-r$r-w$k
      sync; echo 3 > /proc/sys/vm/drop_caches
      mkdir $d
      pid=$(cat $W/$l/pid)
      perf stat -x, -e task-clock,context-switches -p $pid -o $W/stat.txt &
      ps_pid=$!
      sleep 0.3
      rate=$(python3 $HELPER parallel $d $k ${FILES:-2000} 4096 | sed -n 's/.*rate=\([^ ]*\).*/\1/p')
      kill -INT $ps_pid; wait $ps_pid
      ms=$(awk -F, '/task-clock/ { print $1 }' $W/stat.txt); cs=$(awk -F, '/context-switches/ { print $1 }' $W/stat.txt)
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$l" "$r" "$k" "$rate" "$(cut -d' ' -f1 /proc/loadavg)" \
        "$(awk -v c="$cs" -v n=$((k * ${FILES:-2000})) 'BEGIN { printf "%.0f", c * 1000 / n }')" \
        "$(awk -v m="$ms" -v n=$((k * ${FILES:-2000})) 'BEGIN { printf "%.1f", m * 1000 / n }')"
      rm -rf $d
      DOCDRIVE_HOME=$W/$l/home timeout 150 ${bins[$i]} sync --timeout 120 >/dev/null 2>&1 || echo "sync $l timed out" >&2
    done
  done
done
echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
