"""Node images are data, not tests: pytest must not walk them.

Their sysfs trees keep the kernel's relative symlinks, and sysfs links form cycles
(``device/infiniband/<dev>/device`` ...), which a directory walk would follow without end.
"""

collect_ignore_glob = ["*"]
