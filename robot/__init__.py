"""The physical arm behind EtherCAT (master side): configuration, PDO codec, CiA 402, units,
safety, bus (the only module importing pysoem), cyclic loop and the `hardware` backend.

Layers, lowest first: config -> pdo, units, cia402, drivecheck, rt, netif (the port's checks) -> safety, torque_bound, plan
-> bus (pysoem) -> loop -> runfiles, busreport -> backend. See docs/hardware.md (supervision,
stop sequence, watchdogs, distributed clocks, units). ``robot.backend.preflight(arm, settings)`` refuses an unarmed run up front.
"""
from .config import EthercatConfig, load_config  # noqa: F401
