"""The lldp source's cost on a node with 8 rails: the passive listener idle, and at one LLDP frame per second per rail.

Builds a node namespace with 8 veth rails (``net_rail0..7``) whose peers sit in a "switch" namespace, then, in
one process inside the node namespace (``time.process_time``: every thread, the listener's included):

- CPU per sample: one ``read_lldp(..., "listen")`` of the 8 rails (decode the last frame of each, note the
  rest), over 500 samples;
- the listener's CPU per second with no frame on the wire (idle), over ``--seconds``;
- the same with a sender in the switch namespace putting one LLDP frame a second on each of the 8 peers
  (a switch at LLDP's fastest transmit interval; the default is 30 s), over ``--seconds``.

The agent's budget is 1 % of a core when idle (``bench_agent.py``'s soak target, 10 ms of CPU a second): the
ratios say what share of it the source takes (the source reads every 30 s by default, so its per-second cost
is the listener's plus a thirtieth of a sample). Needs root. Every namespace is deleted on exit.
Run: ``python bench/bench_lldp.py [--seconds 20] [--json]``; exit status 0, 3 without root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAILS = 8
#: the agent's idle CPU budget (bench_agent.py's soak target): 1 % of a core
BUDGET_CPU_PER_S = 0.01

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from agent.host.live import LiveHost
from agent.readers.common import Notes
from agent.readers.lldp import read_lldp
rails = [f"net_rail{i}" for i in range(int(sys.argv[2]))]
seconds = float(sys.argv[3])
host = LiveHost()
read_lldp(host, rails, "listen")  # the listener starts on the first read
time.sleep(0.5)
out = {}
def sample_cost(n=500):
    t = time.process_time()
    for _ in range(n):
        read_lldp(host, rails, "listen", notes=Notes())
    return (time.process_time() - t) / n
out["sample_idle_s"] = sample_cost()
t = time.process_time(); time.sleep(seconds); out["listener_idle_cpu_per_s"] = (time.process_time() - t) / seconds
print("ready", flush=True)
sys.stdin.readline()  # the sender runs now
time.sleep(2.0)
t = time.process_time(); time.sleep(seconds); out["listener_1fps_cpu_per_s"] = (time.process_time() - t) / seconds
got = read_lldp(host, rails, "listen")
out["rails_heard"] = len(got)
out["sample_1fps_s"] = sample_cost()
print(json.dumps(out), flush=True)
"""

SENDER = r"""
import socket, struct, sys, time
def tlv(t, v): return struct.pack("!H", (t << 9) | len(v)) + v
n = int(sys.argv[1])
socks, frames = [], []
for i in range(n):
    src = bytes([2, 0, 0, 0, 0x10, i])
    body = (tlv(1, b"\x04" + src) + tlv(2, b"\x05swp%d" % (i + 1)) + tlv(3, struct.pack("!H", 120))
            + tlv(4, b"to gpu-node rail %d" % i) + tlv(5, b"leaf-bench")
            + tlv(127, bytes.fromhex("00120f04") + struct.pack("!H", 9216))
            + tlv(127, bytes.fromhex("0080c20b") + bytes([0x08, 0x08])) + tlv(0, b""))
    frames.append(bytes.fromhex("0180c200000e") + src + b"\x88\xcc" + body)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((f"peer{i}", 0)); socks.append(s)
while True:
    t = time.monotonic()
    for s, f in zip(socks, frames):
        s.send(f)
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
"""


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="Each listener measurement's length. Default: 20.")
    ap.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_lldp: needs root (network namespaces)", file=sys.stderr)
        return 3
    tag = uuid.uuid4().hex[:6]
    node, sw = f"rs-lb-node-{tag}", f"rs-lb-sw-{tag}"
    sender = None
    try:
        _ip("netns", "add", node)
        _ip("netns", "add", sw)
        for i in range(RAILS):
            _ip("-n", node, "link", "add", f"net_rail{i}", "mtu", "9000", "type", "veth", "peer", "name", f"peer{i}",
                "netns", sw)
            _ip("-n", node, "link", "set", f"net_rail{i}", "up")
            _ip("-n", sw, "link", "set", f"peer{i}", "up")
        child = subprocess.Popen(["ip", "netns", "exec", node, sys.executable, "-c", CHILD, str(ROOT), str(RAILS),
                                  str(args.seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdin is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the measuring child did not start")
        sender = subprocess.Popen(["ip", "netns", "exec", sw, sys.executable, "-c", SENDER, str(RAILS)])
        child.stdin.write("go\n")
        child.stdin.flush()
        out = json.loads(child.stdout.readline())
        child.wait(timeout=60)
    finally:
        if sender is not None:
            sender.terminate()
            sender.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", node], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", sw], capture_output=True, check=False)
    per_s = {k: out[f"listener_{k}_cpu_per_s"] + out[f"sample_{k}_s"] / 30.0 for k in ("idle", "1fps")}
    out["source_cpu_per_s_at_30s_interval"] = per_s
    out["share_of_agent_idle_budget"] = {k: v / BUDGET_CPU_PER_S for k, v in per_s.items()}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"lldp source, {RAILS} rails, passive listener (Python {sys.version.split()[0]})")
        print(f"  CPU per sample (read of {RAILS} rails): idle {out['sample_idle_s'] * 1e6:.0f} us, "
              f"at 1 frame/s/rail {out['sample_1fps_s'] * 1e6:.0f} us ({out['rails_heard']} rails heard)")
        print(f"  listener CPU: idle {out['listener_idle_cpu_per_s'] * 1e3:.3f} ms/s, at 1 frame/s/rail "
              f"{out['listener_1fps_cpu_per_s'] * 1e3:.3f} ms/s")
        for k, v in per_s.items():
            print(f"  the source at its 30 s interval, {k}: {v * 1e3:.3f} ms of CPU a second = "
                  f"{v / BUDGET_CPU_PER_S:.3f}x the agent's idle budget (1 % of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
