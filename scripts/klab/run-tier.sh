#!/bin/bash
# run-tier.sh - the kernel lab test tier: build the lab once (cached), prepare the guest's Python
# packages once (cached), boot one guest that runs every scenario of tests/klab/guest_scenarios.py
# against a real 6.1 kernel with netdevsim, rdma_rxe and nlmon, and copy what it wrote to $KLAB_RESULTS.
#
# The lab itself is not part of this repository: its script is $KLAB_LAB, by default
# ../shared/klab/run-lab.sh beside the checkout; without it this script exits 2 (the tier is skipped).
# It boots Debian's own kernel under QEMU (TCG) and runs a script in a chroot made of the host's /usr
# and /etc (read-only 9p), so the guest runs the host's *system* python3 (/usr/bin/python3) and iproute2.
# The project tree is shared read-only at the same path; the Python packages the agent imports are
# installed with `pip install --target` into $WORK/guest-site (the guest sees $WORK).
#
# Usage:  scripts/klab/run-tier.sh                  # build if needed, then one guest run
#         KLAB_RESULTS=/tmp/r scripts/klab/run-tier.sh
#         KLAB_STEPS=prepare scripts/klab/run-tier.sh   # CI: build + guest packages only (cacheable step)
# Env:    KLAB_WORK     cache directory (default ${TMPDIR:-/tmp}/railscope-klab); keep it between runs
#         KLAB_RESULTS  where the guest's /out is copied (default $WORK/results)
#         KLAB_STEPS    "prepare run" (default)
#         KVER          Debian kernel ABI; default: run-lab.sh's, or the newest 6.1 the archive has
# Exit:   0 when the guest ran the scenarios (their verdicts are in results.json: the pytest tier
#         asserts on them); 2 when the lab cannot be had here (not root, no QEMU, no kernel package);
#         1 when the lab broke.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PROJECT=$(cd "$HERE/../.." && pwd)
LAB=${KLAB_LAB:-$PROJECT/../shared/klab/run-lab.sh}
WORK=${KLAB_WORK:-${TMPDIR:-/tmp}/railscope-klab}
RESULTS=${KLAB_RESULTS:-$WORK/results}
STEPS=${KLAB_STEPS:-prepare run}
# A wedged guest is killed by QEMU's timeout in run-lab.sh; the scenarios take 2-4 minutes under
# emulation (longer when the host is busy).
export QEMU_TIMEOUT=${QEMU_TIMEOUT:-900}
export WORK
log() { printf '=== klab: %s  [%s]\n' "$*" "$(date +%T)"; }
cannot() { echo "klab: cannot run here: $*" >&2; exit 2; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

[ "$(id -u)" = 0 ] || cannot "needs root (9p passthrough of /usr and /etc, apt for qemu-system-x86)"
[ "$(uname -m)" = x86_64 ] || cannot "the lab boots an amd64 kernel; this is $(uname -m)"
[ -x "$LAB" ] || [ -f "$LAB" ] || cannot "no lab script at $LAB (set KLAB_LAB)"
mkdir -p "$WORK"

if [ -z "${KVER:-}" ]; then
  # run-lab.sh pins an ABI; when the archive has moved on, take the newest 6.1 image it offers.
  KVER=$(sed -n 's/^KVER=\${KVER:-\([^}]*\)}.*/\1/p' "$LAB" | head -1)
  if ! apt-cache show "linux-image-$KVER" >/dev/null 2>&1; then
    newest=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
             awk '{print $1}' | sed 's/^linux-image-//' | sort -V | tail -1)
    [ -n "$newest" ] && KVER=$newest
  fi
fi
export KVER

lab_built() {
  [ -s "$WORK/build/initramfs.cpio.gz" ] && [ -s "$WORK/tools/bin/kmod" ] &&
    [ -s "$WORK/guestmods/lib/modules/$KVER/extra/netdevsim.ko" ] &&
    [ -d "$WORK/pkgs/image/lib/modules/$KVER" ]
}

guest_requirements() {
  # The same versions the host's tests run with, so a guest failure is never a version skew.
  python3 - <<'PY'
from importlib import metadata
for dist in ("pyroute2", "msgpack", "prometheus_client", "psutil", "aiohttp", "aiohappyeyeballs",
             "aiosignal", "attrs", "frozenlist", "multidict", "propcache", "yarl"):
    try:
        print(f"{dist}=={metadata.version(dist)}")
    except metadata.PackageNotFoundError:
        print(dist)
PY
}

if has prepare; then
  if lab_built; then
    log "lab cached in $WORK (kernel $KVER)"
  else
    command -v qemu-system-x86_64 >/dev/null || command -v apt-get >/dev/null ||
      cannot "no qemu-system-x86_64 and no apt-get to install it"
    log "building the lab in $WORK (kernel $KVER; first time: about a minute plus downloads)"
    (cd "$WORK" && STEPS="fetch build" KVER="$KVER" bash "$LAB") > "$WORK/build.log" 2>&1 || {
      tail -30 "$WORK/build.log" >&2
      if grep -q "unknown to apt" "$WORK/build.log"; then cannot "linux-image-$KVER is unknown to apt"; fi
      echo "klab: lab build failed (log: $WORK/build.log)" >&2; exit 1; }
    lab_built || { echo "klab: lab build left no initramfs/netdevsim.ko (log: $WORK/build.log)" >&2; exit 1; }
  fi

  want=$(guest_requirements | tr '\n' ' ')
  if [ "$(cat "$WORK/guest-site/.requirements" 2>/dev/null)" != "$want" ]; then
    log "guest packages -> $WORK/guest-site: $want"
    rm -rf "$WORK/guest-site.new"
    # shellcheck disable=SC2086
    if ! /usr/bin/python3 -m pip install -q --disable-pip-version-check --no-compile \
          --target "$WORK/guest-site.new" $want 2>"$WORK/guest-site.log"; then
      # Debian's python3 may lack pip: any CPython 3.11 on this machine installs the same wheels
      # (same minor version and platform), binary wheels only so nothing is built for the wrong one.
      /usr/bin/python3 -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null ||
        cannot "/usr/bin/python3 is not CPython 3.11 and has no pip"
      python3 -c 'import sys; assert sys.version_info[:2] == (3, 11)' ||
        cannot "no pip for /usr/bin/python3 and no other python3.11 with pip"
      # shellcheck disable=SC2086
      python3 -m pip install -q --disable-pip-version-check --no-compile --only-binary=:all: \
        --target "$WORK/guest-site.new" $want
    fi
    echo -n "$want" > "$WORK/guest-site.new/.requirements"
    rm -rf "$WORK/guest-site"; mv "$WORK/guest-site.new" "$WORK/guest-site"
  else
    log "guest packages cached"
  fi
fi

if has run; then
  lab_built || cannot "the lab is not built in $WORK (run with KLAB_STEPS=prepare first)"
  # The guest cannot write bytecode (the project and $WORK are read-only there), and every python3
  # it starts would compile the agent and the stdlib it imports again under emulation (seconds per
  # process). Compile with the guest's own interpreter here; unchanged files are skipped.
  PYTHONPYCACHEPREFIX="$WORK/pycache" /usr/bin/python3 -m compileall -q -j 0 \
    -x '/(test|tests|idlelib|lib2to3|tkinter|turtledemo|ensurepip)/' \
    /usr/lib/python3.11 "$WORK/guest-site" "$PROJECT/agent" >/dev/null 2>&1 || true
  # KLAB_ONLY="firmware health": only these scenarios (and setup) run in the guest; empty: all.
  printf '%s\n' "${KLAB_ONLY:-}" > "$WORK/klab-only"
  log "booting the guest: scenarios from $PROJECT${KLAB_ONLY:+ (only: $KLAB_ONLY)}"
  t0=$(date +%s)
  # q35 and qemu/qemu-system-x86_64 (first on PATH): one real PCIe NIC behind a root port, for the
  # pcie scenario (sysfs link speed / width, AER); the other scenarios do not see it as a rail.
  (cd "$WORK" && PATH="$HERE/qemu:$PATH" MACHINE=q35 STEPS=run RUNS=1 KVER="$KVER" SHARE_DIRS="$PROJECT" \
     GUEST_SCRIPT="$HERE/guest.sh" bash "$LAB") > "$WORK/run.log" 2>&1 || {
    tail -30 "$WORK/run.log" >&2; echo "klab: guest run failed (log: $WORK/run.log)" >&2; exit 1; }
  rm -rf "$RESULTS"; mkdir -p "$(dirname "$RESULTS")"
  cp -r "$WORK/runs/run1" "$RESULTS"
  cp "$WORK/run.log" "$RESULTS/run-lab.log"
  log "guest done in $(( $(date +%s) - t0 )) s; results in $RESULTS"
  grep -a 'KLAB-MARK' "$RESULTS/console.log" || true
  [ -s "$RESULTS/results.json" ] || { echo "klab: the guest wrote no results.json (see $RESULTS/guest.log)" >&2; exit 1; }
fi
