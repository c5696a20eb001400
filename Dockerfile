# One image for both programs: `railscope agent` (DaemonSet) and `railscope collector`.
# The agent reads the node through the host's /sys, /proc and /etc mounted at /host, and runs the
# same read-only tools an operator would: devlink and rdma (iproute2), ethtool, ovs-vsctl.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 ethtool openvswitch-common \
 && rm -rf /var/lib/apt/lists/*

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
