"""CLI: run the emulated EtherCAT drives on an interface until Ctrl-C / SIGTERM.

    python -m twin.ethercat --iface ecs0 --config assets/cobot6_ethercat.yaml \
        --urdf assets/cobot6.urdf --drives assets/cobot6_drives.yaml [--n-slaves 6] [--q0 0,0.3,...]
"""
from __future__ import annotations

import argparse
import json
import signal
import sys

from .server import ServerParams, build_chain, serve


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin.ethercat", description=__doc__.splitlines()[0])
    ap.add_argument("--iface", required=True, help="network interface (e.g. one end of a veth pair)")
    ap.add_argument("--config", required=True, help="EtherCAT drive configuration YAML")
    ap.add_argument("--urdf", help="arm URDF for the twin")
    ap.add_argument("--drives", help="drive parameter YAML for the twin")
    ap.add_argument("--n-slaves", type=int, default=None, help="drives on the line (default: all in the config)")
    ap.add_argument("--q0", default=None, help="initial joint positions [rad], comma separated")
    ap.add_argument("--motion", choices=("twin", "follower"), default="twin",
                    help="motion source (follower = first-order test double, no physics)")
    ap.add_argument("--settings", default=None, help="twin settings as a JSON object")
    ap.add_argument("--watchdog", type=float, default=0.5, help="SyncManager watchdog [s] in OP (<= 0: off)")
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--no-realtime", action="store_true", help="do not ask for SCHED_FIFO")
    a = ap.parse_args(argv)
    settings = json.loads(a.settings) if a.settings else {}
    if not isinstance(settings, dict):
        ap.error("--settings must be a JSON object")
    settings["motion"] = a.motion
    q0 = None
    if a.q0:
        try:
            q0 = [float(x) for x in a.q0.split(",")]
        except ValueError:
            ap.error(f"--q0 {a.q0!r}: expected comma-separated numbers [rad]")
    params = ServerParams(a.iface, a.config, a.urdf, a.drives, settings, a.n_slaves, q0,
                          a.watchdog if a.watchdog > 0 else None, realtime=not a.no_realtime,
                          record_truth=False)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    chain = build_chain(params)

    def ready(info):
        print(f"twin.ethercat: {len(chain.slaves)} drives on {a.iface} ({a.motion}, SCHED_FIFO "
              f"{'on' if info['realtime'] else 'off'}); Ctrl-C to stop", flush=True)
    chain = serve(params, chain=chain, stop_after_s=a.duration, on_ready=ready)
    st = chain.status()
    print(f"twin.ethercat: stopped after {st['frames']} frames, {st['cycles']} process-data cycles", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
