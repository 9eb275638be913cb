"""The emulated slave chain on a network interface: a raw AF_PACKET socket (EtherType 0x88A4)
answered by :class:`~twin.ethercat.chain.SlaveChain`, in its own OS process.

:func:`serve` is the loop (used by the CLI and by the child process): it waits on the socket and
the control channel with ``select``, answers every frame at once, steps the twin after the answer
of a process-data frame is sent (clock "frame": one 1 ms period per LRW frame, so the simulation
runs in lock-step with the master's cycle whatever the wall-clock jitter; clock "sync0": the
elapsed periods of the wall clock: one per frame, plus the cycles the master skipped, stepped
before the answer), and runs the SyncManager watchdog.

:class:`SlaveChainProcess` starts it as a separate interpreter and talks to it over a socketpair
(a multiprocessing Connection): fault injection, status, ground truth, stop.
"""
from __future__ import annotations

import gc
import os
import select
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from .chain import FAULT_KINDS, SlaveChain
from .config import load_slave_config
from .frames import ETHERTYPE_ECAT
from .motion import make_motion


@dataclass
class ServerParams:
    """Everything the child process needs to build the chain (plain, picklable values)."""
    iface: str
    config: str
    urdf: str | None = None
    drives: str | None = None
    twin_settings: dict = field(default_factory=dict)
    n_slaves: int | None = None
    q0: list | None = None
    watchdog_s: float | None = 0.5
    following_window_rad: float = 0.2
    realtime: bool = True
    record_truth: bool = True
    clock: str = "frame"


def build_chain(params: ServerParams) -> SlaveChain:
    cfg = load_slave_config(params.config)
    settings = dict(params.twin_settings or {})
    q0 = params.q0 if params.q0 is not None else settings.get("q0")
    motion = make_motion([d.joint for d in cfg.drives], params.urdf, params.drives, settings, cfg.cycle_time_s)
    return SlaveChain(cfg, motion, params.n_slaves, q0, params.watchdog_s, params.following_window_rad,
                      params.record_truth, params.clock)


def open_socket(iface: str) -> socket.socket:
    """Raw socket bound to `iface` for EtherType 0x88A4 (needs root / CAP_NET_RAW)."""
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE_ECAT))
    except PermissionError as exc:
        raise PermissionError(f"cannot open a raw EtherCAT socket on {iface!r}: needs root / CAP_NET_RAW") from exc
    try:
        sock.bind((iface, ETHERTYPE_ECAT))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind a raw socket to interface {iface!r}: {exc}") from exc
    sock.setblocking(False)
    return sock


_LATENCY_FD: list = []     # the PM QoS request lives as long as this fd (the process)


def _try_realtime() -> bool:
    """SCHED_FIFO for the emulator, pinned to the FIRST CPU: the master's loop pins itself to the
    last one (robot.rt.harden) and busy-polls for the answer at a higher priority -- on one
    shared CPU it would starve the emulator it waits for. And a 0 us CPU wake-up latency request
    (/dev/cpu_dma_latency), as the master's loop makes: an ESC answers on the fly, while this
    process sleeps in select, and an idle (virtual) CPU that halted can take milliseconds to
    wake for the frame -- bursts of lost frames on a 2-vCPU VM otherwise."""
    try:
        if not _LATENCY_FD:
            fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
            try:
                os.write(fd, (0).to_bytes(4, "little", signed=True))
            except OSError:
                os.close(fd)
                raise
            _LATENCY_FD.append(fd)
    except OSError:
        pass
    try:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > 1:
            os.sched_setaffinity(0, {cpus[0]})
    except (OSError, AttributeError):
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
        return True
    except (OSError, AttributeError):
        return False


def _handle(chain: SlaveChain, msg) -> tuple:
    op = msg[0]
    if op == "inject":
        return ("ok", chain.inject(msg[1], **msg[2]))
    if op == "status":
        return ("ok", chain.status())
    if op == "truth":
        return ("ok", chain.truth())
    raise ValueError(f"unknown control request {op!r}")


def serve(params: ServerParams, conn=None, chain: SlaveChain | None = None, stop_after_s: float | None = None,
          on_ready=None) -> SlaveChain:
    """Run the chain on `params.iface` until a ("stop",) arrives on `conn` (or `stop_after_s`
    passes, or KeyboardInterrupt). `conn` is an optional multiprocessing connection for
    control requests; the answer to each is ("ok", result) or ("error", message). `on_ready(info)`
    is called once the socket is open."""
    chain = chain or build_chain(params)
    sock = open_socket(params.iface)
    rt = _try_realtime() if params.realtime else False
    info = {"pid": os.getpid(), "realtime": rt, "n_slaves": len(chain.slaves),
            "joint_names": list(chain.motion.joint_names)}
    if conn is not None:
        conn.send(("ready", info))
    if on_ready is not None:
        on_ready(info)
    waits = [sock] + ([conn] if conn is not None else [])
    gc.collect()
    gc.freeze()            # no collector pauses mid-run (frames allocate no reference cycles)
    gc.disable()
    t_end = None if stop_after_s is None else time.monotonic() + stop_after_s
    recv, send, process, after = sock.recv, sock.send, chain.process, chain.after_frame
    clock, answer_ns, step_ns = time.perf_counter_ns, chain.answer_ns, chain.step_ns
    sync0 = chain.clock == "sync0"
    try:
        while True:
            ready, _, _ = select.select(waits, [], [], 0.005)   # SM watchdog resolution
            if sock in ready:
                batch = []                            # every frame waiting (more than one: a stall)
                while True:
                    try:
                        batch.append(recv(2048))
                    except BlockingIOError:
                        break
                if sync0:
                    chain.catch_up(sum(map(chain.is_process_data, batch)))
                for frame in batch:
                    t0 = clock()
                    out = process(frame)
                    if out is not None:
                        try:
                            send(out)
                        except OSError as exc:        # e.g. ENOBUFS: the answer is lost like a dropped frame
                            chain.send_errors += 1
                            chain.last_send_error = str(exc)
                        t1 = clock()
                        answer_ns[chain.frames % len(answer_ns)] = t1 - t0
                        after()
                        step_ns[chain.frames % len(step_ns)] = clock() - t1
                    else:
                        after()
            if conn is not None and conn in ready:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):      # the controlling process is gone
                    break
                if msg[0] == "stop":
                    conn.send(("ok", chain.status()))
                    break
                try:
                    conn.send(_handle(chain, msg))
                except Exception as exc:   # reported to the caller, the chain keeps running
                    conn.send(("error", f"{type(exc).__name__}: {exc}"))
            chain.check_watchdog()
            if t_end is not None and time.monotonic() > t_end:
                break
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        close = getattr(chain.motion, "close", None)
        if close:
            close()
    return chain


def run_child(conn) -> None:
    """Entry of the emulator process: read ServerParams from `conn`, build, serve."""
    try:
        params = conn.recv()
        chain = build_chain(params)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    try:
        serve(params, conn, chain)
    except BaseException:
        tb = traceback.format_exc()
        print(f"twin.ethercat emulator on {params.iface} died:\n{tb}", file=sys.stderr, flush=True)
        try:
            conn.send(("error", tb))
        except Exception:
            pass


class SlaveChainProcess:
    """The twin as N EtherCAT CiA 402 drives on `iface`, in its own OS process.

    Args:
        iface: network interface (one end of a veth pair).
        config: drive configuration YAML (assets/cobot6_ethercat.yaml).
        urdf, drives: arm URDF and drive YAML for the PyBullet twin.
        twin_settings: :class:`twin.TwinSettings` keys, plus "motion": "twin" | "follower" and
            "q0": initial joint positions [rad].
        n_slaves: drives on the line (None -> one per drive in the config).
        watchdog_s: SyncManager watchdog [s] in OP (None -> off).
        following_window_rad: CiA 402 following error window [rad].
        clock: "frame" (one twin period per process-data frame) or "sync0" (one per elapsed
            cycle of wall time, as a DC-synchronised drive); see :class:`SlaveChain`.

    Slave numbers in :meth:`inject` are 0-based bus positions (pysoem ``master.slaves[k]``).
    """

    def __init__(self, iface: str, config, urdf=None, drives=None, twin_settings: dict | None = None,
                 n_slaves: int | None = None, q0=None, watchdog_s: float | None = 0.5,
                 following_window_rad: float = 0.2, realtime: bool = True, record_truth: bool = True,
                 clock: str = "frame"):
        self.params = ServerParams(iface, str(config), None if urdf is None else str(urdf),
                                   None if drives is None else str(drives), dict(twin_settings or {}),
                                   n_slaves, None if q0 is None else [float(x) for x in q0], watchdog_s,
                                   following_window_rad, realtime, record_truth, clock)
        if not Path(self.params.config).is_file():
            raise FileNotFoundError(f"EtherCAT configuration file not found: {self.params.config}")
        self._proc = None
        self._conn = None
        self.info: dict = {}

    def start(self, timeout: float = 60.0) -> "SlaveChainProcess":
        """Start the emulator process; returns once it listens on the interface (raises on failure).

        The emulator is a fresh interpreter (``python -m twin.ethercat.child``) talking over a
        socketpair, so callers need no ``__main__`` guard and share no state with it."""
        if self._proc is not None:
            raise RuntimeError("SlaveChainProcess already started")
        parent, child = socket.socketpair()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._proc = subprocess.Popen([sys.executable, "-m", "twin.ethercat.child", str(child.fileno())],
                                      pass_fds=[child.fileno()], env=env)
        child.close()
        self._conn = Connection(parent.detach())
        self._conn.send(self.params)
        if not self._conn.poll(timeout):
            self._kill()
            raise TimeoutError(f"EtherCAT slave emulator on {self.params.iface} did not start within {timeout} s")
        try:
            kind, info = self._conn.recv()
        except EOFError:
            kind, info = "error", "the emulator process exited before it was ready"
        if kind != "ready":
            self._kill()
            raise RuntimeError(f"EtherCAT slave emulator on {self.params.iface} failed to start:\n{info}")
        self.info = info
        return self

    def _request(self, msg, timeout: float = 10.0):
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("EtherCAT slave emulator is not running")
        self._conn.send(msg)
        if not self._conn.poll(timeout):
            raise TimeoutError(f"EtherCAT slave emulator did not answer {msg[0]!r} within {timeout} s")
        kind, result = self._conn.recv()
        if kind != "ok":
            raise ValueError(result)
        return result

    def inject(self, kind: str, **kwargs) -> dict:
        """Inject a fault: "drive_fault" (slave, code=0x2310), "drop_frames" (count),
        "corrupt_frames" (count; the ESCs see CRC errors: frames come back unprocessed with
        working counter 0), "stop_answering" / "resume_answering" (slave), "sdo_abort" (index,
        code=0x08000020, slave=None -> all), "wrong_identity" (slave, vendor_id, product_code;
        default product code + 1; read by the next bring-up), "clear"."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {FAULT_KINDS}")
        return self._request(("inject", kind, kwargs))

    def status(self) -> dict:
        """Frame / cycle counters and per-slave AL state, AL status code, CiA 402 state."""
        return self._request(("status",))

    def truth(self) -> dict:
        """Ground truth of every twin period so far (see :meth:`SlaveChain.truth`)."""
        return self._request(("truth",), timeout=60.0)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> dict | None:
        """Stop the emulator process; returns its final status (None if it had already died)."""
        if self._proc is None:
            return None
        result = None
        try:
            if self._proc.poll() is None:
                self._conn.send(("stop",))
                if self._conn.poll(timeout):
                    kind, result = self._conn.recv()
            self._proc.wait(timeout)
        except (BrokenPipeError, EOFError, OSError, subprocess.TimeoutExpired):
            pass
        finally:
            self._kill()
        return result

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(5)
            self._proc = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


__all__ = ["SlaveChainProcess", "ServerParams", "serve", "build_chain", "open_socket"]
