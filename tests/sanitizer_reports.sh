# SPDX-License-Identifier: MIT
# Sourced by the tests whose Python drivers start pkv's programs
# (pkv-server, pkv-router, pkv-gguf; fleet.sh's processes): in a
# sanitizer build (tests/run.sh's ASan+UBSan and TSan passes) every report
# those processes write goes to a file of this directory, so that a
# report counts whoever started the process and however it ended: a
# server the fleet stops with SIGTERM and whose exit status nobody reads,
# a router killed mid-test, a ThreadSanitizer report (which does not stop
# the process) in a process killed before its exit. Unsanitized builds
# ignore these variables and write nothing. UndefinedBehaviorSanitizer's
# reports are not among them: GCC's ASan+UBSan runtimes write those to
# the process's stderr whatever log_path says, and the build stops the
# process at the first (-fno-sanitize-recover=all), which the drivers
# see as its exit status or its requests failing.
#
#   . tests/sanitizer_reports.sh
#   python ... ; sanitizer_reports $?   # exits with the test's result
#
# The options set by the caller (tests/run.sh's suppressions, a test's
# ASAN_OPTIONS) are kept; log_path is appended.
sanitizer_dir=$(mktemp -d "${TMPDIR:-/tmp}/pkv-sanitizer.XXXXXX")
for var in ASAN_OPTIONS TSAN_OPTIONS; do
    eval "value=\${$var:-}"
    # shellcheck disable=SC2154 # value is set by the eval
    export "$var=${value:+$value:}log_path=$sanitizer_dir/report"
done

# sanitizer_reports RC: print every report and exit 1 when there is one,
# else exit RC.
sanitizer_reports() {
    found=0
    for report in "$sanitizer_dir"/report.*; do
        [ -e "$report" ] || continue
        found=1
        echo "FAIL: a sanitizer report ($(basename "$report"), pid after" \
             "the dot):"
        cat "$report"
    done
    rm -rf "$sanitizer_dir"
    [ "$found" -eq 0 ] || exit 1
    exit "$1"
}
