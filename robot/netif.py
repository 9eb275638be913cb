"""The EtherCAT port of this machine: whether a network interface can carry the bus from this
process (it exists, raw sockets are allowed, it is up with a link). No pysoem here, so the
hardware preflight can ask before any design work, on a machine without the hardware extra."""
from __future__ import annotations

import os


def interface_problem(iface: str) -> str | None:
    """Why `iface` cannot carry EtherCAT from this process (and how to fix it), or None."""
    if not iface:
        return "no network interface given: set hardware.iface (e.g. eth1; see `ip link`)"
    if not os.path.exists(f"/sys/class/net/{iface}"):
        have = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
        return (f"no network interface named {iface!r} (this machine has: {', '.join(have) or 'none'}); "
                f"set hardware.iface to the port the EtherCAT cable is plugged into")
    if os.geteuid() != 0 and not _has_cap_net_raw():
        return (f"no permission to open raw sockets on {iface!r}: run as root (sudo) or grant the "
                f"capability: sudo setcap cap_net_raw,cap_net_admin+ep $(readlink -f $(which python))")
    try:
        with open(f"/sys/class/net/{iface}/operstate") as fh:
            oper = fh.read().strip()
        with open(f"/sys/class/net/{iface}/flags") as fh:
            up = int(fh.read().strip(), 16) & 0x1
    except OSError:
        return None
    if not up:
        return f"interface {iface!r} is down: sudo ip link set {iface} up"
    if oper == "down":
        return f"interface {iface!r} has no link (operstate down): check the cable and the first slave"
    return None


def _has_cap_net_raw() -> bool:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 13))
    except OSError:
        pass
    return False
