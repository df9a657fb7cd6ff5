#!/usr/bin/env bash
# fuzz.sh: builds the fuzzers (libFuzzer, Fuzz/Sources/DocDriveFuzz) and runs one target or all of
# them over their corpus (Fuzz/corpus/TARGET/). Exits 1 if a target crashes (the input is kept in
# .build-fuzz/crashes/), 0 otherwise.
#
#   mount-scripts/fuzz.sh [TARGET|all] [--runs N | --time S] [--update] [--seeds] [--no-build] [-- LIBFUZZER-OPTIONS]
#
#   --runs N    at most N inputs per target (after the corpus itself)
#   --time S    at most S seconds per target (default: 2)
#   --update    keep what a target found that adds coverage in Fuzz/corpus/TARGET (merged, -merge=1)
#   --seeds     write the program's own seeds (Seeds.swift) into the corpora (merged) and stop
#   --no-build  use the fuzzer already built
#
# The build is a release build of its own (FUZZ_SCRATCH, default .build-fuzz): the parsers'
# modules instrumented (DOCDRIVE_FUZZ=1 in Package.swift), the dependencies as for the release.
# Every run loads the whole corpus first, so the reproducers of crashes fixed before are checked
# again. Runs under nice, one fuzzer process at a time. Statistics: $FUZZ_SCRATCH/fuzz-stats.tsv.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$DOCDRIVE_REPO"

target=all runs= time=2 update=0 seeds=0 build=1 extra=()
while [ $# -gt 0 ]; do
    case $1 in
        --runs) runs=$2; time=; shift 2 ;;
        --time) time=$2; shift 2 ;;
        --update) update=1; shift ;;
        --seeds) seeds=1; shift ;;
        --no-build) build=0; shift ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) say "fuzz.sh: unknown option $1"; exit 2 ;;
        *) target=$1; shift ;;
    esac
done

TARGETS=(remote-meta s3-xml s3-headers s3-keys s3-answers config reference bookmark query control status query-wire home-json mountinfo)
if [ "$target" = all ]; then chosen=("${TARGETS[@]}")
elif [[ " ${TARGETS[*]} " == *" $target "* ]]; then chosen=("$target")
else say "fuzz.sh: no target $target (targets: ${TARGETS[*]})"; exit 2
fi

scratch=${FUZZ_SCRATCH:-.build-fuzz}
install_runtime_deps
if [ "$build" = 1 ]; then
    say "== building the fuzzers ($scratch) =="
    t0=$(date +%s)
    set +e
    DOCDRIVE_FUZZ=1 nice -n 15 swift build -c release --scratch-path "$scratch" --product docdrive-fuzz 2>&1 \
        | grep -vE '^\[[0-9]+/[0-9]+\] (Compiling|Emitting|Linking|Write|Build|Copying)' >&2
    built=${PIPESTATUS[0]}
    set -e
    [ "$built" -eq 0 ] || { say "fuzz.sh: the fuzzers' build failed."; exit 1; }
    say "fuzz.sh: built in $(( $(date +%s) - t0 )) s"
fi
bin=$scratch/release/docdrive-fuzz
[ -x "$bin" ] || { say "fuzz.sh: $bin is missing (run without --no-build)."; exit 1; }

# Swift keeps some memory to the end on purpose: leaks are not what these targets look for.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
# libFuzzer prints the stack of a crash itself (Swift's backtracer would wait for a debugger's
# worth of symbolication first).
export SWIFT_BACKTRACE=enable=no
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$scratch/crashes"

if [ "$seeds" = 1 ]; then
    DOCDRIVE_FUZZ_SEEDS=$work/seeds "$bin" >&2
    for t in "${chosen[@]}"; do
        mkdir -p "Fuzz/corpus/$t"
        [ -d "$work/seeds/$t" ] || continue
        DOCDRIVE_FUZZ_TARGET=$t nice -n 15 "$bin" -merge=1 "Fuzz/corpus/$t" "$work/seeds/$t" 2>&1 | grep -E '^MERGE-OUTER: [0-9]+ new files' >&2 || true
    done
    exit 0
fi

failed=()
for t in "${chosen[@]}"; do
    mkdir -p "Fuzz/corpus/$t" "$work/$t"
    limit=()
    [ -n "$runs" ] && limit+=(-runs="$runs")
    [ -n "$time" ] && limit+=(-max_total_time="$time")
    say "== fuzzing $t (${runs:+$runs runs}${time:+$time s}) =="
    log=$work/$t.log
    # New inputs go to a folder of this run; the repo's corpus is only read (unless --update).
    set +e
    DOCDRIVE_FUZZ_TARGET=$t nice -n 15 "$bin" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$scratch/crashes/$t-" "${limit[@]}" "${extra[@]}" "$work/$t" "Fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "${execs:-0}" "${speed:-0}" "$rc" >> "$scratch/fuzz-stats.tsv"
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        grep -E 'ERROR|broken promise|Fatal error|runtime failure|SUMMARY|Test unit written|^    #[0-9]+ ' "$log" | head -n 40 >&2
        say "fuzz.sh: $t crashed (exit $rc); the input is in $scratch/crashes/ (whole log: rerun with it as the only argument)."
        continue
    fi
    say "fuzz.sh: $t: ${execs:-?} inputs, ${speed:-?}/s, no crash"
    if [ "$update" = 1 ] && [ -n "$(ls -A "$work/$t")" ]; then
        DOCDRIVE_FUZZ_TARGET=$t nice -n 15 "$bin" -merge=1 "Fuzz/corpus/$t" "$work/$t" 2>&1 | grep -E '^MERGE-OUTER: [0-9]+ new files' >&2 || true
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    say "fuzz.sh: FAILED: ${failed[*]}"
    exit 1
fi
say "fuzz.sh: no crash in ${chosen[*]}"
