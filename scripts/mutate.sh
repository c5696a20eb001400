#!/usr/bin/env bash
# Mutation testing of the pure parts with mutmut (not in CI: it runs the unit tests once per mutant).
#   scripts/mutate.sh checks     analysis/checks/ and detectors/ (a short run)
#   scripts/mutate.sh            analysis/ (topology, checks, diagnose) and detectors/
#   scripts/mutate.sh all        also the readers' parsers and readers/history.py
#   scripts/mutate.sh readers [MODULE...]
#                                the readers' parsers and readers/history.py alone, or only the named
#                                modules of agent/readers/ (e.g. `readers history devlink`), against the
#                                readers' tests
#   scripts/mutate.sh agent/analysis/diagnose.py agent/analysis/checks/pfc.py ...
#                                these modules alone (or ONLY="..." with any scope), against the tests of
#                                the analysis and the detectors: one module at a time is minutes, not an hour
# Runs in a temporary copy of the committed tree (REV=<commit> for another one) (mutmut writes mutants/
# beside the code), prints mutmut's results (survivors by name) and the score: killed / (killed + survived).
# The results and every survivor's diff (mutmut show) go to $RESULTS (or $OUT; default
# /tmp/railscope-mutate-<scope>.txt), which outlives the copy.
# RERUN=<an earlier $RESULTS> runs only that run's survivors (tests are only ever added, so a killed mutant
# stays killed): the score printed is then over those survivors alone.
# MUTANTS="<pattern>..." runs only the mutants whose names match (fnmatch, as mutmut takes them), e.g.
# MUTANTS='agent.analysis.topology.x_build_topology__mutmut_*' for one function of a long module.
set -euo pipefail
scope=${1:-pure}
[ $# -gt 0 ] && shift
modules=${ONLY:-}
case "$scope" in
  pure|checks|all|readers) ;;
  *) modules="$modules $scope $*"; scope=modules ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/railscope-mutate.XXXXXX)
trap 'rm -rf "$work"' EXIT
rev=$(git -C "$root" rev-parse --short "${REV:-HEAD}")  # the commit mutated, whatever HEAD becomes meanwhile
git -C "$root" archive "$rev" | tar -x -C "$work"
results=$(realpath -m "${RESULTS:-${OUT:-/tmp/railscope-mutate-$scope.txt}}")
cd "$work"
only='"agent/analysis/*", "agent/detectors/*"'
[ "$scope" = checks ] && only='"agent/analysis/checks/*", "agent/detectors/*"'
tests='"tests/unit/analysis", "tests/unit/detectors", "tests/unit/test_images.py"'
if [ "$scope" = all ]; then
  only="$only, \"agent/readers/*\""
  tests="$tests, \"tests/unit/readers\", \"tests/unit/host/netlink/test_netlink_parse.py\", \"tests/unit/readers/test_snapshot.py\""
fi
# The readers' parse functions: snapshot.py and sources.py only wire readers to a host, they parse nothing.
# Not tests/unit/host/test_image_mutations.py: its random images kill a mutant by chance or not at all,
# and its 300 examples would cost every surviving mutant of a reader some seconds.
readers_tests='"tests/unit/readers", "tests/unit/host/netlink/test_netlink_parse.py", "tests/unit/readers/test_snapshot.py",
  "tests/unit/test_images.py", "tests/unit/service/test_recorder.py", "tests/unit/analysis/checks/test_history.py",
  "tests/unit/service/test_events.py", "tests/unit/capture/test_ovs_rundir.py"'
if [ "$scope" = readers ]; then
  names_=${*:-links pci devlink health rdma ethtool versions udev ovs common history}
  only=""
  for m in $names_; do
    [ -f "agent/readers/$m.py" ] || { echo "no module agent/readers/$m.py" >&2; exit 2; }
    only="$only${only:+, }\"agent/readers/$m.py\""
  done
  tests=$readers_tests
fi
if [ -n "${modules// /}" ]; then
  only=""
  for m in $modules; do
    [ -e "$m" ] || { echo "mutate.sh: no module $m in $rev" >&2; exit 2; }
    only="${only:+$only, }\"$m\""
  done
fi
cat >>pyproject.toml <<CFG

[tool.mutmut]
source_paths = ["agent"]
only_mutate = [$only]
pytest_add_cli_args_test_selection = [$tests]
pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider", "-m", ""]
CFG
# mutmut copies tests/ with shutil.copytree, which follows symlinks: the node images' sysfs symlinks
# loop (class/net -> devices -> ... -> class/net), so the copy never ends. Keep them symlinks.
mutmut() {
  python3 -c 'import shutil, sys
_copytree = shutil.copytree
def copytree(src, dst, *args, **kw):
    if not args:  # the outer call; the recursion passes symlinks on
        kw.setdefault("symlinks", True)
    return _copytree(src, dst, *args, **kw)
shutil.copytree = copytree
sys.argv = ["mutmut", *sys.argv[1:]]
from mutmut.__main__ import cli
cli()' "$@"
}
names=()
if [ -n "${RERUN:-}" ]; then
  mapfile -t names < <(sed -n 's/^ *\([^ :]*\): survived$/\1/p' "$RERUN" | sort -u)
  echo "re-running the ${#names[@]} survivors of $RERUN"
  [ "${#names[@]}" -gt 0 ] || exit 0
fi
if [ -n "${MUTANTS:-}" ]; then
  read -ra patterns <<<"$MUTANTS"
  names+=("${patterns[@]}")
  echo "running the mutants matching: ${patterns[*]}"
fi
# Every mutant's pytest run leaves a basetemp (the node-image tests make ~140 MB of it), and pytest's
# retention of the last 3 does not keep up with mutmut's forked children: hundreds pile up in an hour.
# Keep them under the copy, and sweep the ones untouched for 10 minutes as the run goes (a mutant's run
# takes seconds; mutmut's first whole run keeps making directories). The sweeper must outlive a failed
# find (pytest removing a directory under it), and holds no output open once it is killed.
export PYTEST_DEBUG_TEMPROOT="$work/tmp"
mkdir -p "$PYTEST_DEBUG_TEMPROOT"
( set +e
  while sleep 30; do
    find "$PYTEST_DEBUG_TEMPROOT" -mindepth 2 -maxdepth 2 -name 'pytest-*' -mmin +10 -exec rm -rf {} +
  done ) >/dev/null 2>&1 &
sweeper=$!
trap 'kill "$sweeper" 2>/dev/null; rm -rf "$work"' EXIT
start=$(date +%s)
mutmut run --max-children "${MUTMUT_CHILDREN:-2}" ${names[@]+"${names[@]}"} || true
mutmut results --all true >"$work/results.txt" 2>&1 || mutmut results >"$work/results.txt" 2>&1 || true
score=$(python3 - "$work/results.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
counts = {k: len(re.findall(rf": {k}\b", text)) for k in ("killed", "survived", "timeout", "no tests", "suspicious")}
done = counts["killed"] + counts["survived"]
print("mutants:", counts, f"score {counts['killed'] / done:.1%}" if done else "score n/a")
PY
)
# A survivor (or a timeout) is only worth a name with its diff beside it: what the mutant changed is what
# a test must state.
{
  echo "# scope: $scope  rev: $rev  took: $(($(date +%s) - start))s  modules: ${only}"
  echo "$score"
  echo
  grep -v ": killed$" "$work/results.txt" || true
  for name in $(sed -n 's/^ *\([^ :]*\): \(survived\|timeout\)$/\1/p' "$work/results.txt"); do
    echo
    echo "=== $name"
    mutmut show "$name" 2>&1 || true
  done
} >"$results"
grep -v ": killed$" "$work/results.txt" || true
echo "$score"
echo "results and survivors' diffs: $results"
