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

import time

import numpy as np
import pysoem

from .cia402 import MODE_CSP
from .config import EthercatConfig
from .pdo import PdoLayout, pack_sdo_value

STATE_NAMES = {pysoem.NONE_STATE: "NONE", pysoem.INIT_STATE: "INIT", pysoem.PREOP_STATE: "PREOP",
               pysoem.BOOT_STATE: "BOOT", pysoem.SAFEOP_STATE: "SAFEOP", pysoem.OP_STATE: "OP"}


class BusError(RuntimeError):
    """Bring-up or communication failure; the message names interface, slave and AL status."""


class IdentityError(BusError):
    """A slave's vendor id / product code / revision differs from the configuration."""


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
                 receive_timeout_us: int | None = None, op_timeout_s: float = 5.0):
        self.cfg = cfg
        self.iface = iface
        self.layout = PdoLayout.from_config(cfg)
        self.complete_access = complete_access
        self.timeout_us = int(receive_timeout_us or round(cfg.bus.cycle_time_s * 1e6))
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
        m = pysoem.Master()
        try:
            m.open(self.iface)
        except Exception as exc:
            raise BusError(f"cannot open EtherCAT interface {self.iface!r}: {exc}") from exc
        self.master = m
        self._opened = True
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
        if self.cfg.bus.distributed_clocks:
            if not m.config_dc():
                raise BusError(f"{self.iface}: distributed clocks requested but no slave supports DC")
            cyc_ns = int(round(self.cfg.bus.cycle_time_s * 1e9))
            for s in m.slaves:
                s.dc_sync(True, cyc_ns)
        out = self.layout.new_outputs(n)
        if "modes_of_operation" in out.dtype.names:
            out["modes_of_operation"] = MODE_CSP
        self.expected_wkc = int(m.expected_wkc)
        self.exchange(out)
        m.state = pysoem.OP_STATE
        m.write_state()
        deadline = time.monotonic() + self.op_timeout_s
        while True:
            self.exchange(out)
            if m.state_check(pysoem.OP_STATE, 1000) == pysoem.OP_STATE:
                break
            if time.monotonic() > deadline:
                raise BusError(f"{self.iface}: not all slaves reached OP within {self.op_timeout_s} s: "
                               f"{self.al_report()}")
            time.sleep(self.cfg.bus.cycle_time_s)

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
        if bad:
            raise IdentityError(f"{self.iface}: identity mismatch (configuration {self.cfg.path}): "
                                + "; ".join(bad))

    def _make_hook(self, k: int):
        sdos = [(s.index, s.sub, pack_sdo_value(s.type, s.value), False) for s in self.cfg.startup_sdo]
        sdos += self.layout.assignment_sdos(self.complete_access)

        def hook(slave):
            for index, sub, data, ca in sdos:
                try:
                    slave.sdo_write(index, sub, data, ca=ca)
                except Exception as exc:
                    code = getattr(exc, "abort_code", None)
                    desc = getattr(exc, "desc", "")
                    what = (f"abort code {code:#010x} {desc}".strip() if code is not None
                            else f"{type(exc).__name__}: {exc}")
                    self._hook_errors.append(f"{self._slave_label(k)}: SDO write {index:#06x}:{sub} "
                                             f"failed ({what})")
                    return
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

    def lost_slaves(self) -> list[str]:
        """Slaves that no longer answer (state NONE on a fresh read)."""
        return [self._slave_label(k) for k, (st, _) in enumerate(self.read_states())
                if st == pysoem.NONE_STATE]

    def close(self) -> None:
        """Request INIT for all slaves (best effort) and close the interface."""
        m, self.master = self.master, None
        if m is None:
            return
        try:
            m.state = pysoem.INIT_STATE
            m.write_state()
        except Exception:
            pass
        if self._opened:
            m.close()
        self._opened = False
