#!/usr/bin/env bash
# Where `make test`'s time goes, phase by phase.
#   scripts/timed.sh LOG NAME CMD...   run CMD; append "NAME<TAB>SECONDS<TAB>EXIT" to LOG; exit with CMD's status
#                                      (on failure the split so far is printed first, so a red run says it too)
#   scripts/timed.sh LOG --report      print the split: one line per phase, its share of the whole, and the total
set -uo pipefail
log=$1
shift
report() {
  [ -f "$log" ] || return 0
  awk -F'\t' '{ name[NR] = $1; s[NR] = $2; rc[NR] = $3; total += $2 }
    END {
      print "test-times: where make test'\''s time went"
      for (i = 1; i <= NR; i++)
        printf "test-times:   %-34s %5d s  %3d %%%s\n", name[i], s[i], total ? 100 * s[i] / total : 0, rc[i] ? "  (failed, exit " rc[i] ")" : ""
      printf "test-times:   %-34s %5d s  (%d min %d s)\n", "total", total, total / 60, total % 60
    }' "$log"
}
if [ "${1:-}" = --report ]; then report; exit 0; fi
name=$1
shift
mkdir -p "$(dirname "$log")"
t0=$SECONDS
"$@"
rc=$?
printf '%s\t%d\t%d\n' "$name" $((SECONDS - t0)) "$rc" >>"$log"
[ "$rc" -eq 0 ] || report
exit "$rc"
