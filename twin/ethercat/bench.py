"""Benchmark: how fast the emulated slaves answer a process-data frame over a veth pair.

    sudo python -m twin.ethercat.bench [--frames 3000] [--period-us 1000] [--client-realtime]
                                       [--no-realtime]

One raw-socket client (this process) sends a 1 kHz stream of LRW frames (the layout SOEM uses for
6 drives) and times each round trip, against three responders on the other end of a fresh veth
pair, measured in the same run:

  echo      baseline: a minimal Python raw-socket loop that sends each frame straight back
  follower  the emulator (6 drives in OP) with the first-order follower motion
  twin      the emulator (6 drives in OP) stepping the PyBullet twin once per frame

It prints median / p99 / max round trip, frames later than the period, lost frames, and the
ratio of each median to the echo baseline, plus the emulator's own receive -> answer time.
Target: every frame answered well under 1 ms (SOEM's default receive timeout is 2 ms). On a
loaded machine the round trip is dominated by the client's wake-up unless the client (the
master's loop) runs with SCHED_FIFO as well (--client-realtime).
"""
from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .frames import ETHERTYPE_ECAT
from .server import SlaveChainProcess

ROOT = Path(__file__).resolve().parents[2]

_ECHO = r"""
import select, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88A4)); s.bind((sys.argv[1], 0x88A4))
print("ready", flush=True)
while True:
    f = s.recv(2048)
    b = bytearray(f); b[6] |= 2
    s.send(b)
"""


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def _lrw_frame(nbytes: int, idx: int) -> bytes:
    body = bytes([12, idx & 0xFF]) + struct.pack("<IHH", 0, nbytes, 0) + bytes(nbytes) + b"\x00\x00"
    return b"\xff" * 6 + b"\x01" * 6 + b"\x88\xa4" + struct.pack("<H", len(body) | 0x1000) + body


def _measure(iface: str, frames: int, period_s: float, nbytes: int) -> dict:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE_ECAT))
    s.bind((iface, ETHERTYPE_ECAT))
    s.settimeout(0.05)
    rtt, lost = [], 0
    t_next = time.perf_counter()
    for k in range(frames):
        dt = t_next - time.perf_counter()
        if dt > 0:
            time.sleep(dt)
        t_next += period_s
        f = _lrw_frame(nbytes, k)
        t0 = time.perf_counter()
        s.send(f)
        while True:
            try:
                r = s.recv(2048)
            except socket.timeout:
                lost += 1
                break
            if len(r) > 17 and r[17] == (k & 0xFF):
                rtt.append(time.perf_counter() - t0)
                break
    s.close()
    a = np.array(rtt) * 1e6
    return {"median_us": float(np.median(a)), "p99_us": float(np.percentile(a, 99)), "max_us": float(a.max()),
            "late": int(np.sum(a > period_s * 1e6)), "lost": lost, "n": frames}


def _bring_to_op(iface: str) -> None:
    import pysoem
    m = pysoem.Master()
    m.open(iface)
    try:
        m.config_init()
        m.config_map()
        m.state_check(pysoem.SAFEOP_STATE, 500000)
        m.send_processdata()
        m.receive_processdata(20000)
        m.state = pysoem.OP_STATE
        m.write_state()
        for _ in range(100):
            m.send_processdata()
            m.receive_processdata(20000)
            if m.state_check(pysoem.OP_STATE, 5000) == pysoem.OP_STATE:
                break
        if m.state_check(pysoem.OP_STATE, 50000) != pysoem.OP_STATE:
            raise RuntimeError("emulated drives did not reach OP")
    finally:
        m.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin.ethercat.bench")
    ap.add_argument("--frames", type=int, default=3000)
    ap.add_argument("--period-us", type=float, default=1000.0)
    ap.add_argument("--no-realtime", action="store_true", help="emulator without SCHED_FIFO")
    ap.add_argument("--client-realtime", action="store_true",
                    help="run the timing client (the 'master') with SCHED_FIFO priority 10 too")
    a = ap.parse_args(argv)
    if a.client_realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    tag = f"{os.getpid() % 100000}"
    m_if, s_if = f"ebm{tag}", f"ebs{tag}"
    r = _ip("link", "add", m_if, "type", "veth", "peer", "name", s_if)
    if r.returncode:
        print(f"cannot create a veth pair: {r.stderr.strip()}", file=sys.stderr)
        return 1
    results = {}
    try:
        for n in (m_if, s_if):
            _ip("link", "set", n, "up")
        echo = subprocess.Popen([sys.executable, "-c", _ECHO, s_if], stdout=subprocess.PIPE, text=True)
        try:
            echo.stdout.readline()
            results["echo"] = _measure(m_if, a.frames, a.period_us * 1e-6, 180)
        finally:
            echo.terminate()
            echo.wait(5)
        cfg = ROOT / "assets" / "cobot6_ethercat.yaml"
        for name, settings in (("follower", {"motion": "follower"}), ("twin", {"motion": "twin"})):
            proc = SlaveChainProcess(s_if, cfg, ROOT / "assets" / "cobot6.urdf", ROOT / "assets" / "cobot6_drives.yaml",
                                     twin_settings=settings, q0=[0, 0.3, -0.5, 0, 0.4, 0], watchdog_s=None,
                                     realtime=not a.no_realtime).start()
            try:
                _bring_to_op(m_if)
                results[name] = _measure(m_if, a.frames, a.period_us * 1e-6, 180)
                results[name]["realtime"] = proc.info.get("realtime")
                st = proc.status()
                results[name]["cycles"] = st["cycles"]
                results[name]["server"] = st["answer_us"]
            finally:
                proc.stop()
    finally:
        _ip("link", "del", m_if)
    base = results["echo"]["median_us"]
    print(f"{'responder':10s} {'median us':>10s} {'p99 us':>8s} {'max us':>8s} {'late':>5s} {'lost':>5s} {'ratio':>6s}"
          f" {'SCHED_FIFO':>10s}")
    for name, r in results.items():
        print(f"{name:10s} {r['median_us']:10.1f} {r['p99_us']:8.1f} {r['max_us']:8.1f} {r['late']:5d} {r['lost']:5d} "
              f"{r['median_us'] / base:6.2f} {str(r.get('realtime', '-')):>10s}")
    print(f"({a.frames} LRW frames of 180 data bytes at {a.period_us:.0f} us; ratio = median / echo median)")
    for name in ("follower", "twin"):
        sv = results[name]["server"]
        print(f"{name}: inside the emulator, frame received -> answer sent: median {sv['median']:.1f} us, "
              f"p99 {sv['p99']:.1f} us, max {sv['max']:.1f} us, over 1 ms {sv['over_1ms']} of {sv['n']} "
              f"(includes bring-up frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
