#!/bin/bash
# Runs INSIDE the kernel lab guest (booted by run-tier.sh through run-lab.sh): a chroot of the host's
# /usr and /etc, the project tree read-only at its host path, $WORK read-only, /out writable.
# Loads the test drivers from the lab's module tree, then runs every scenario with the system python3.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PROJECT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/out}
export PATH=$WORK/tools/bin:$PATH
export PYTHONPATH=$PROJECT:$WORK/guest-site
# Bytecode compiled on the host by run-tier.sh (read-only here: nothing is written back).
export PYTHONPYCACHEPREFIX=$WORK/pycache PYTHONDONTWRITEBYTECODE=1
echo klab-node > /proc/sys/kernel/hostname
{
  # netdevsim and rdma_rxe come from the lab's own module tree; nlmon (netlink tap, to see what the
  # agent asks the kernel) from the unpacked Debian image, where depmod already ran.
  modprobe -d "$WORK/guestmods" -S "$KVER" netdevsim
  modprobe -d "$WORK/guestmods" -S "$KVER" rdma_rxe
  modprobe -d "$WORK/pkgs/image" -S "$KVER" nlmon
  # the pcie scenario's NIC (QEMU e1000e behind a PCIe root port) and the kernel's AER error injector
  modprobe -d "$WORK/pkgs/image" -S "$KVER" e1000e
  modprobe -d "$WORK/pkgs/image" -S "$KVER" aer_inject
  uname -r; /usr/bin/python3 --version; ip -V; devlink -V; rdma -V
} > "$OUT/guest-env.txt" 2>&1
# KLAB_ONLY on the host (run-tier.sh writes it to $WORK/klab-only): run only these scenarios (setup always).
only=()
for name in $(cat "$WORK/klab-only" 2>/dev/null); do only+=(--only "$name"); done
/usr/bin/python3 -u "$PROJECT/tests/klab/guest_scenarios.py" --out "$OUT" "${only[@]}" > "$OUT/guest.log" 2>&1
echo $? > "$OUT/guest.rc"
dmesg > "$OUT/dmesg.txt" 2>&1
