"""The EtherCAT bus through pysoem (SOEM): bring-up to OP, process-data exchange, diagnostics.

The only module of the package that imports pysoem. Bring-up order (SOEM's):
open -> config_init (slaves in PREOP) -> identity check of every slave against the configuration
-> per-slave ``setup_func`` hooks (startup SDO list, then PDO mapping/assignment) run inside
config_map -> process-image sizes validated against the PDO layout -> SAFEOP -> optional DC ->
one exchange -> OP, exchanging until every slave reports OP. Every failure raises
:class:`BusError` naming the interface, the slave (1-based bus position and joint) and the AL
status code where there is one.
"""
from __future__ import annotations

import math
import os
import struct
import time

import numpy as np
import pysoem

from .drive.cia402 import MODE_CSP
from .config import EthercatConfig
from .netif import interface_problem
from .drive.drivecheck import (ABORT_NO_OBJECT, DriveCheckError, abort_code, check_units, object_label,
                         read_units, retry_sdo, sdo_error_text)
from .drive.pdo import PdoLayout, pack_sdo_value

STATE_NAMES = {pysoem.NONE_STATE: "NONE", pysoem.INIT_STATE: "INIT", pysoem.PREOP_STATE: "PREOP",
               pysoem.BOOT_STATE: "BOOT", pysoem.SAFEOP_STATE: "SAFEOP", pysoem.OP_STATE: "OP"}
AL_STATES = frozenset((pysoem.INIT_STATE, pysoem.PREOP_STATE, pysoem.BOOT_STATE, pysoem.SAFEOP_STATE,
                       pysoem.OP_STATE))       # the low nibble of 0x0130 that a slave can report


class BusError(RuntimeError):
    """Bring-up or communication failure; the message names interface, slave and AL status."""


class IdentityError(BusError):
    """A slave's vendor id / product code / revision differs from the configuration."""


def _socket_fds() -> set[int]:
    """File descriptors of this process that are sockets (Linux /proc)."""
    out = set()
    try:
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    out.add(int(name))
            except OSError:
                continue
    except OSError:
        pass
    return out


def state_name(state: int) -> str:
    base = STATE_NAMES.get(state & 0x0F, f"{state & 0x0F:#x}")
    return base + ("+ERROR" if state & pysoem.STATE_ERROR else "")


class EthercatBus:
    """One EtherCAT master on `iface` for the drives of `cfg` (bus position k = cfg.drives[k]).

    Args:
        complete_access: write the PDO mapping with CoE complete access instead of single entries.
        receive_timeout_us: process-data receive timeout [us] (default: the cycle time).
        op_timeout_s: time allowed for all slaves to reach SAFEOP/OP.
    """

    def __init__(self, cfg: EthercatConfig, iface: str, *, complete_access: bool = False,
                 receive_timeout_us: int | None = None, op_timeout_s: float = 5.0,
                 reaction_sdos: list | None = None):
        self.cfg = cfg
        # per drive (bus order): [(index, sub, type, value)] of robot.drive.reactions, written in
        # PREOP after the startup SDOs (required: a drive without them is refused)
        self.reaction_sdos = reaction_sdos or [[] for _ in cfg.drives]
        self.iface = iface
        self.layout = PdoLayout.from_config(cfg)
        self.complete_access = complete_access
        period_us = cfg.bus.cycle_time_s * 1e6
        self.timeout_us = int(receive_timeout_us or round(cfg.bus.receive_timeout_frac * period_us))
        if self.timeout_us >= period_us:
            raise BusError(f"receive timeout {self.timeout_us} us must stay below the cycle "
                           f"({period_us:.0f} us): a lost frame may cost at most one cycle")
        self.report: dict = {"iface": iface, "slaves": []}
        self.units_read: list[dict] = [{} for _ in cfg.drives]
        self.dc = False
        self.op_timeout_s = op_timeout_s
        self.master: pysoem.Master | None = None
        self.expected_wkc = 0
        self._hook_errors: list[str] = []
        self._opened = False

    # -- bring-up ---------------------------------------------------------------------------
    def _slave_label(self, k: int) -> str:
        joint = self.cfg.drives[k].joint if k < self.cfg.n_drives else "?"
        return f"slave {k + 1} ({joint})"

    def open(self) -> None:
        """Bring the chain up to OP (see module docstring). Raises BusError / IdentityError."""
        why = interface_problem(self.iface)
        if why:
            raise BusError(why)
        m = pysoem.Master()
        fds_before = _socket_fds()
        try:
            m.open(self.iface)
        except Exception as exc:
            raise BusError(f"cannot open EtherCAT interface {self.iface!r}: {exc} (needs root or "
                           f"CAP_NET_RAW and an existing interface)") from exc
        self.master = m
        self._opened = True
        # SOEM's raw socket blocks in recv() for SO_RCVTIMEO = 1 us, which Linux rounds up to a
        # jiffy (4-10 ms): every lost frame would cost several cycles whatever the receive
        # timeout. Non-blocking, SOEM polls until its own timer (the receive timeout) expires.
        self.nonblocking_fds = []
        for fd in sorted(_socket_fds() - fds_before):
            try:
                os.set_blocking(fd, False)
                self.nonblocking_fds.append(fd)
            except OSError:
                pass
        try:
            self._bring_up()
        except BaseException:
            self.close()
            raise

    def _bring_up(self) -> None:
        m = self.master
        n = m.config_init()
        if n is None or n <= 0:
            raise BusError(f"{self.iface}: no EtherCAT slaves answered (config_init returned {n})")
        if n != self.cfg.n_drives:
            raise BusError(f"{self.iface}: found {n} slaves, the configuration {self.cfg.path} has "
                           f"{self.cfg.n_drives} drives")
        self.check_identity()
        for k, slave in enumerate(m.slaves):
            slave.setup_func = self._make_hook(k)
        self._hook_errors = []
        try:
            m.config_map()
        except Exception as exc:   # pysoem wraps hook exceptions in ConfigMapError
            detail = "; ".join(self._hook_errors) or str(exc)
            raise BusError(f"{self.iface}: PREOP->SAFEOP configuration failed: {detail}") from exc
        if self._hook_errors:
            raise BusError(f"{self.iface}: PREOP configuration failed: " + "; ".join(self._hook_errors))
        self.layout.validate_sizes([len(s.output) for s in m.slaves], [len(s.input) for s in m.slaves])
        if m.state_check(pysoem.SAFEOP_STATE, int(self.op_timeout_s * 1e6)) != pysoem.SAFEOP_STATE:
            raise BusError(f"{self.iface}: not all slaves reached SAFEOP: {self.al_report()}")
        self._setup_dc()
        self._setup_watchdogs()
        out = self.layout.new_outputs(n)
        if "modes_of_operation" in out.dtype.names:
            out["modes_of_operation"] = MODE_CSP
        self.expected_wkc = int(m.expected_wkc)
        self.exchange(out)
        m.state = pysoem.OP_STATE
        m.write_state()
        # from here on, a datagram outside the process data (AL state reads) that gets no answer
        # costs at most the receive timeout, not SOEM's default 2 ms
        self._ret_timeout = pysoem.settings.timeouts.ret
        pysoem.settings.timeouts.ret = self.timeout_us
        deadline = time.monotonic() + self.op_timeout_s
        while True:
            self.exchange(out)
            if m.state_check(pysoem.OP_STATE, 1000) == pysoem.OP_STATE:
                break
            if time.monotonic() > deadline:
                raise BusError(f"{self.iface}: not all slaves reached OP within {self.op_timeout_s} s: "
                               f"{self.al_report()}")
            time.sleep(self.cfg.bus.cycle_time_s)

    def _setup_dc(self) -> None:
        """Distributed clocks: "auto" -> on when SOEM finds DC-capable slaves; SYNC0 every cycle
        with the configured shift on every slave."""
        m, want = self.master, self.cfg.bus.distributed_clocks
        self.dc = False
        if want is False:
            return
        has = bool(m.config_dc())
        if not has:
            if want is True:
                raise BusError(f"{self.iface}: distributed clocks required (bus.distributed_clocks: "
                               f"true) but no slave supports DC")
            return
        cyc_ns = int(round(self.cfg.bus.cycle_time_s * 1e9))
        shift_ns = int(round(self.cfg.bus.sync0_shift_s * 1e9))
        for s in m.slaves:
            s.dc_sync(True, cyc_ns, shift_ns)
        self.dc = True

    def _setup_watchdogs(self) -> None:
        """SyncManager (process-data) watchdog on every slave: 0x0400 divider, 0x0420 time."""
        ms = self.cfg.bus.watchdog_s * 1e3
        self.watchdogs_ms = []
        for k, s in enumerate(self.master.slaves):
            for attempt in range(3):          # register access: retried on a lost frame
                try:
                    s.set_watchdog("processdata", ms)
                    self.watchdogs_ms.append(float(s.get_watchdog("processdata")))
                    break
                except Exception as exc:
                    if attempt == 2:
                        raise BusError(f"{self._slave_label(k)}: cannot program the SyncManager "
                                       f"watchdog (0x0400/0x0420) to {ms:g} ms: {type(exc).__name__}"
                                       f"{': ' + str(exc) if str(exc) else ' (no answer to the register write)'}"
                                       ) from exc
        bad = [(k, w) for k, w in enumerate(self.watchdogs_ms) if abs(w - ms) > max(0.2, 0.02 * ms)]
        if bad:
            raise BusError("; ".join(f"{self._slave_label(k)}: SyncManager watchdog reads back "
                                     f"{w:g} ms, programmed {ms:g} ms" for k, w in bad))

    def check_identity(self) -> None:
        """Compare every slave's SII identity with the configuration; refuse on any mismatch."""
        bad = []
        for k, s in enumerate(self.master.slaves):
            got = (int(s.man), int(s.id), int(s.rev))
            want = (self.cfg.vendor_id, self.cfg.product_code, self.cfg.revision)
            if got != want:
                bad.append(f"{self._slave_label(k)} '{s.name}': vendor {got[0]:#010x} product "
                           f"{got[1]:#010x} revision {got[2]:#010x}, expected vendor {want[0]:#010x} "
                           f"product {want[1]:#010x} revision {want[2]:#010x}")
        if not bad:
            bad = self._check_serials() + self._check_aliases()
        if bad:
            raise IdentityError(f"{self.iface}: identity mismatch (configuration {self.cfg.path}): "
                                + "; ".join(bad))

    def _check_serials(self) -> list[str]:
        """Serial numbers 0x1018:4 (read by SDO in PREOP) against ``drives[k].serial_number``
        where configured: identical drives with swapped cables are refused naming both
        positions. Returns the mismatch texts."""
        want = [d.serial_number for d in self.cfg.drives]
        if all(w is None for w in want):
            return []
        got = []
        for k, s in enumerate(self.master.slaves):
            try:
                got.append(struct.unpack("<I", bytes(retry_sdo(s.sdo_read, 0x1018, 4))[:4])[0])
            except Exception as exc:  # noqa: BLE001
                return [f"{self._slave_label(k)}: " + sdo_error_text("read", 0x1018, 4, exc)]
        return self._mismatches(want, got, "serial", "serial number 0x1018:4")

    def _check_aliases(self) -> list[str]:
        """Configured station aliases (SII word 4, what the ESC loads into register 0x0012)
        against ``drives[k].station_alias`` where configured; swapped drives are named at both
        positions. Returns the mismatch texts."""
        want = [d.station_alias for d in self.cfg.drives]
        if all(w is None for w in want):
            return []
        got = []
        for k, s in enumerate(self.master.slaves):
            try:
                got.append(struct.unpack("<H", bytes(s.eeprom_read(4))[:2])[0])
            except Exception as exc:  # noqa: BLE001
                return [f"{self._slave_label(k)}: station alias (SII word 4) not readable: "
                        f"{type(exc).__name__}: {exc}"]
        return self._mismatches(want, got, "alias", "station alias (SII word 4 / 0x0012)")

    def _mismatches(self, want: list, got: list, short: str, what: str) -> list[str]:
        """Texts for the positions whose read value `got[k]` differs from the configured
        `want[k]` (None: not configured); a value configured for another position is named
        there too (identical drives with swapped cables)."""
        bad = []
        for k, (w, g) in enumerate(zip(want, got)):
            if w is None or w == g:
                continue
            other = [j for j, wj in enumerate(want) if wj == g and j != k]
            where = (f"; {short} {g} is configured for {self._slave_label(other[0])} (swapped "
                     f"cables?)" if other else "")
            bad.append(f"{self._slave_label(k)}: {what} reads {g}, configured {w}{where}")
        return bad

    def _make_hook(self, k: int):
        d = self.cfg.drives[k]
        sc = self.cfg.safety
        window = int(round(sc.following_error_max_rad / (2 * math.pi) * d.counts_per_link_rev))
        sdos = [(s.index, s.sub, pack_sdo_value(s.type, s.value), False, s.optional)
                for s in self.cfg.startup_sdo]
        sdos += [(0x6065, 0, struct.pack("<I", window), False, False),
                 (0x6066, 0, struct.pack("<H", max(1, int(round(sc.following_error_timeout_s * 1e3)))),
                  False, True)]
        sdos += [(i, s_, pack_sdo_value(t, v), False, False) for i, s_, t, v in self.reaction_sdos[k]]
        sdos += [(*x, False) for x in self.layout.assignment_sdos(self.complete_access)]
        label = self._slave_label(k)

        def hook(slave):
            skipped = []
            for index, sub, data, ca, optional in sdos:
                try:
                    retry_sdo(slave.sdo_write, index, sub, data, ca=ca)
                except Exception as exc:
                    if optional and abort_code(exc) in (ABORT_NO_OBJECT, 0x06090011):
                        skipped.append(object_label(index, sub))
                        continue
                    self._hook_errors.append(f"{label}: " + sdo_error_text("write", index, sub, exc))
                    return
            try:
                got = read_units(lambda i, s_: slave.sdo_read(i, s_), label)
                notes = check_units(d, got, label)
                mode = struct.unpack("<b", bytes(retry_sdo(slave.sdo_read, 0x6061, 0))[:1])[0]
            except DriveCheckError as exc:
                self._hook_errors.append(str(exc))
                return
            except Exception as exc:
                self._hook_errors.append(f"{label}: " + sdo_error_text("read", 0x6061, 0, exc))
                return
            if mode != MODE_CSP:
                self._hook_errors.append(f"{label}: the drive ignores the mode request: 0x6061 "
                                         f"(modes of operation display) reads {mode}, 0x6060 was set "
                                         f"to {MODE_CSP} (CSP); refusing to enable")
                return
            self.units_read[k] = dict(got, notes=notes, skipped_optional=skipped,
                                      following_error_window_counts=window,
                                      stop_reactions={f"{i:#06x}": v for i, _s, _t, v in self.reaction_sdos[k]})
        return hook

    # -- cyclic -----------------------------------------------------------------------------
    def exchange(self, outputs: np.ndarray) -> tuple[int, np.ndarray]:
        """One process-data cycle: write `outputs` (rx records, bus order), send, receive.
        Returns (working counter, tx records in bus order). wkc <= 0: no frame came back."""
        m = self.master
        for s, b in zip(m.slaves, self.layout.encode(outputs)):
            s.output = b
        m.send_processdata()
        wkc = m.receive_processdata(self.timeout_us)
        return int(wkc), self.layout.decode([s.input for s in m.slaves])

    # -- diagnostics ------------------------------------------------------------------------
    def slave_names(self) -> list[str]:
        return [str(s.name) for s in self.master.slaves]

    def read_states(self) -> list[tuple[int, int]]:
        """(AL state, AL status code) of every slave, read from the bus now."""
        self.master.read_state()
        return [(int(s.state), int(s.al_status)) for s in self.master.slaves]

    def al_report(self) -> str:
        parts = []
        for k, (st, code) in enumerate(self.read_states()):
            txt = pysoem.al_status_code_to_string(code) if code else "no error"
            parts.append(f"{self._slave_label(k)} {state_name(st)} AL status {code:#06x} ({txt})")
        return "; ".join(parts)

    def al_faults(self) -> str | None:
        """Read every slave's AL state now: None if all are in OP without error, else a message
        naming each slave that is not, with its AL status code and the code's meaning. A finding
        must repeat on an immediate second read (a corrupted or lost state frame is no finding)."""
        def bad_now():
            out = {}
            for k, (st, code) in enumerate(self.read_states()):
                if st == pysoem.NONE_STATE or (st & 0x0F) not in AL_STATES:
                    # no answer to the state read (lost frame / lost slave: counted elsewhere), or
                    # no AL state at all (e.g. 0x0F: a late answer to another datagram taken for
                    # this one after a lost frame freed its index) -- not a finding
                    continue
                if (st & 0x0F) != pysoem.OP_STATE or st & pysoem.STATE_ERROR or code:
                    out[k] = (st, code)
            return out
        first = bad_now()
        if not first:
            return None
        again = bad_now()
        bad = {k: v for k, v in first.items() if again.get(k) == v}
        if not bad:
            return None
        return "; ".join(f"{self._slave_label(k)} in {state_name(st)}, AL status code {code:#06x} "
                         f"({pysoem.al_status_code_to_string(code) if code else 'no AL status code'})"
                         for k, (st, code) in bad.items())

    def read_emergencies(self, k: int) -> list[dict]:
        """Read slave k's mailbox once (0-based); CoE emergency messages found -> dicts
        (slave, joint, error_code, error_register, data). Costs one or two datagrams."""
        s = self.master.slaves[k]
        out = []
        for _ in range(4):                       # several may be queued
            try:
                s.mbx_receive()
                break
            except pysoem.Emergency as e:
                out.append({"slave": k + 1, "joint": self.cfg.drives[k].joint,
                            "error_code": int(e.error_code), "error_register": int(e.error_reg),
                            "data": [int(e.b1), int(e.w1), int(e.w2)]})
            except Exception:  # noqa: BLE001 -- a lost mailbox read is retried next time
                break
        return out

    def lost_slaves(self) -> list[str]:
        """Slaves that no longer answer (state NONE on a fresh read)."""
        return [self._slave_label(k) for k, (st, _) in enumerate(self.read_states())
                if st == pysoem.NONE_STATE]

    def bus_report(self) -> dict:
        """What a dry run prints: slaves, identities, states, PDO sizes, DC, watchdogs, units."""
        m = self.master
        states = self.read_states()
        slaves = []
        for k, s in enumerate(m.slaves):
            st, code = states[k]
            slaves.append({
                "position": k + 1, "joint": self.cfg.drives[k].joint, "name": str(s.name),
                "vendor_id": f"{int(s.man):#010x}", "product_code": f"{int(s.id):#010x}",
                "revision": f"{int(s.rev):#010x}", "state": state_name(st),
                "al_status_code": f"{code:#06x}", "output_bytes": len(s.output),
                "input_bytes": len(s.input),
                "watchdog_ms": self.watchdogs_ms[k] if k < len(self.watchdogs_ms) else None,
                "units": self.units_read[k]})
        return {"iface": self.iface, "slaves": slaves, "expected_wkc": self.expected_wkc,
                "distributed_clocks": self.dc, "sync0_shift_s": self.cfg.bus.sync0_shift_s if self.dc else None,
                "cycle_time_s": self.cfg.bus.cycle_time_s, "receive_timeout_us": self.timeout_us,
                "complete_access": self.complete_access}

    def dc_time(self) -> int:
        """System time of the DC reference clock read by the last frame [ns] (0 without DC)."""
        return int(self.master.dc_time) if self.dc else 0

    def close(self) -> None:
        """Request INIT for all slaves (best effort) and close the interface."""
        m, self.master = self.master, None
        if m is None:
            return
        if getattr(self, "_ret_timeout", None):
            pysoem.settings.timeouts.ret = self._ret_timeout
        try:
            m.state = pysoem.INIT_STATE
            m.write_state()
        except Exception:
            pass
        if self._opened:
            m.close()
        self._opened = False
