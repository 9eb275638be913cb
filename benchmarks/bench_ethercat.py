"""Cycle-time statistics of the hardware loop over a veth link (issue 7 benchmark).

Runs, in this order and in the same session:
  1. baseline: the loop's pacing alone (robot.loop.Ticker in a spawned process with the same
     scheduling policy, no bus) for the same duration -- the timer jitter of this machine now;
  2. the full loop (robot.backend, pysoem/SOEM, 6 emulated CiA 402 drives of
     twin.ethercat.SlaveChainProcess on a veth pair) running a `--seconds` trajectory,
     emulator motion `--motion` (follower: cheap first-order drives; twin: PyBullet physics).
Prints median / p99 / max period and late cycles (period > 1.5 cycle times) for both and the
ratios loop/baseline. Needs root (veth pair, raw sockets). Usage:
    python benchmarks/bench_ethercat.py [--seconds 20] [--motion follower|twin]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class Sine:
    def __init__(self, a, duration):
        self.a, self.duration = np.asarray(a, float), duration
        self.w = 2 * np.pi / duration

    @property
    def n_joints(self):
        return len(self.a)

    def evaluate(self, t):
        t = np.asarray(t, float)[:, None]
        s = np.sin(self.w * t)
        return self.a * s, self.a * self.w * np.cos(self.w * t), -self.a * self.w**2 * s


def _pacing(seconds, dt, realtime, q):
    from robot.loop import Ticker
    if realtime:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(30))
        except OSError:
            pass
    n = int(seconds / dt)
    stamps = np.empty(n)
    tick = Ticker(dt)
    for k in range(n):
        tick.wait()
        stamps[k] = time.perf_counter()
    q.put(stamps)


def baseline(seconds, dt, realtime):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_pacing, args=(seconds, dt, realtime, q))
    p.start()
    stamps = q.get()
    p.join()
    from robot.backend import cycle_stats
    return cycle_stats(stamps, dt)


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--motion", choices=("follower", "twin"), default="follower")
    ap.add_argument("--no-realtime", action="store_true", help="do not request SCHED_FIFO")
    ap.add_argument("--stall-cycles", type=int, default=1000,
                    help="stall limit for this measurement (the config's 20 stops the run at the "
                         "first 20 ms pause, which a shared VM produces; the stats report the pauses)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (veth pair, raw sockets)")
        return 2
    from robot.backend import HardwareBackend
    from robot.config import load_config
    from twin.ethercat import SlaveChainProcess
    dt = load_config().bus.cycle_time_s
    rt = not args.no_realtime
    base = baseline(args.seconds, dt, rt)
    m, s = f"bem{os.getpid() % 100000}", f"bes{os.getpid() % 100000}"
    r = sh(f"ip link add {m} type veth peer name {s} && ip link set {m} up && ip link set {s} up")
    if r.returncode:
        print(f"cannot create a veth pair: {r.stderr}")
        return 2
    proc = None
    try:
        proc = SlaveChainProcess(s, ROOT / "assets" / "cobot6_ethercat.yaml", urdf=ROOT / "assets" / "cobot6.urdf",
                                 drives=ROOT / "assets" / "cobot6_drives.yaml",
                                 twin_settings={"motion": args.motion}, record_truth=False).start()
        with tempfile.TemporaryDirectory() as tmp:
            import yaml
            raw = yaml.safe_load((ROOT / "assets" / "cobot6_ethercat.yaml").read_text())
            raw["safety"]["stall_cycles"] = args.stall_cycles
            cfg_path = Path(tmp) / "ethercat.yaml"
            cfg_path.write_text(yaml.safe_dump(raw))
            be = HardwareBackend({}, {"iface": m, "armed": True, "record_dir": str(Path(tmp) / "rec"),
                                      "realtime": rt, "config": str(cfg_path)})
            traj = Sine([0.3, 0.2, -0.2, 0.4, 0.4, 0.5], args.seconds)
            t0 = time.time()
            rec = be.run(traj)
            wall = time.time() - t0
            # the timed loop must have run the trajectory before its times are printed
            if rec.n_samples < 0.9 * args.seconds / dt or not np.all(np.isfinite(rec.q)):
                raise SystemExit(f"insane result: {rec.n_samples} samples for a "
                                 f"{args.seconds:g} s run, or non-finite positions")
        loop = be.last_summary["stats"]
    finally:
        if proc is not None:
            proc.stop()
        sh(f"ip link del {m}")
    print(f"EtherCAT loop cycle time, {args.seconds:g} s trajectory, cycle {dt * 1e3:g} ms, motion "
          f"'{args.motion}', SCHED_FIFO requested: {rt} (granted: {be.last_summary.get('realtime')}), "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'':28s}{'cycles':>8s}{'median ms':>11s}{'p99 ms':>9s}{'max ms':>9s}{'late':>7s}")
    for name, st in (("baseline (pacing only)", base), ("loop over veth (6 drives)", loop)):
        print(f"{name:28s}{st['cycles']:8d}{st['median_s'] * 1e3:11.3f}{st['p99_s'] * 1e3:9.3f}"
              f"{st['max_s'] * 1e3:9.3f}{st['late_cycles']:7d}")
    print(f"ratio loop/baseline: median {loop['median_s'] / base['median_s']:.3f}, p99 "
          f"{loop['p99_s'] / base['p99_s']:.3f}; late cycles {loop['late_cycles']} vs {base['late_cycles']} "
          f"({100 * loop['late_cycles'] / loop['cycles']:.2f} % vs {100 * base['late_cycles'] / base['cycles']:.2f} %)")
    print(f"lost frames {be.last_summary['lost_frames']}, wkc errors {be.last_summary['wkc_errors']}, "
          f"wall time of the run {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
