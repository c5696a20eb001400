# One image for both programs: `railscope agent` (DaemonSet) and `railscope collector`.
# The agent reads the node through the host's /sys, /proc and /etc mounted at /host, and runs the
# same read-only tools an operator would: ip, devlink, rdma and dcb (iproute2), ethtool, ovs-vsctl
# (openvswitch-switch: bookworm's openvswitch-common holds ovs-appctl only), lldpcli (lldpd, for the
# lldp source where the node runs lldpd: the client talks to the node's daemon through its socket),
# dmesg and uname (base).
# tests/unit/deploy/test_dockerfile.py checks this list against every program the agent runs.
FROM python:3.11-slim-bookworm

# openvswitch-switch brings the OVS daemons too; the image never starts them (no init runs), the
# agent only talks to the node's ovsdb-server through the mounted db socket; lldpd's daemon likewise.
# Debian ships lldpcli setuid _lldpd, mode 4750 _lldpd:adm: the agent's root (no DAC_OVERRIDE) could
# not run it and no_new_privs ignores the setuid bit, so it is a plain 0755 program; it reaches the
# node's lldpd by the socket's group (the chart's lldpd.socketGroup).
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 ethtool openvswitch-common openvswitch-switch lldpd \
 && rm -rf /var/lib/apt/lists/* \
 && chmod 0755 /usr/sbin/lldpcli

WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
COPY collector ./collector
COPY proto ./proto
RUN pip install --no-cache-dir . && rm -rf /src

# Non-root is not possible for the agent (netlink dumps of the host netns, ethtool ioctls, devlink
# need CAP_NET_ADMIN / CAP_SYS_ADMIN in the host network namespace); the chart grants only those.
ENTRYPOINT ["railscope"]
CMD ["agent", "--host-root", "/host"]
