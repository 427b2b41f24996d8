"""Facts about the host a pod runs on, without the backends' imports (the pod's server and its
disk thread need them before any job)."""

from __future__ import annotations

import os
import socket


def host_id() -> str:
    """Equal for pods on one host (one boot of it): hostname plus the kernel's boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


def available_host_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
