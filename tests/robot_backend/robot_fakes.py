"""Test double of the EtherCAT bus for unit tests of robot.loop / robot.backend without root or a
network: N CiA 402 drives (state machine per IEC 61800-7-201) whose link position follows the CSP
target as a first-order lag, advanced one 1 ms step per exchange, with scripted faults.
Not used outside tests."""
from __future__ import annotations

import time

import numpy as np

from robot.drive.pdo import PdoLayout
from robot.drive.units import make_units

SW = {"disabled": 0x0250, "ready": 0x0231, "on": 0x0233, "enabled": 0x0637, "fault": 0x0218,
      "quickstop": 0x0217}


class FakeBus:
    """faults: list of dicts {"kind": drive_fault|drop_frames|stop_answering|stall|freeze|sto|quick_stop|
    overtorque|warning|jump, "at": enabled-cycle index, "slave": 0-based, "count": frames,
    "seconds": stall, "permille": torque_actual from then on (overtorque), "rad": encoder jump}.
    freeze: the encoder reading stops (the axis too); warning: statusword bit 7 from then on."""

    def __init__(self, cfg, iface, *, complete_access=False, receive_timeout_us=None,
                 faults=(), q0=None, lag_s=0.004, echo_torque=False, ignore_mode=False,
                 start_fault=None, reaction_sdos=None, open_delay_s=0.0):
        self.open_delay_s = open_delay_s     # a slow bring-up (SOEM's config_init, SDOs)
        self.reaction_sdos = reaction_sdos   # what the real bus would write at bring-up
        self.cfg, self.layout = cfg, PdoLayout.from_config(cfg)
        self.n = cfg.n_drives
        self.units = make_units(cfg)
        self.expected_wkc = 3 * self.n
        self.faults = list(faults)
        self.ignore_mode = ignore_mode   # the drives never show CSP in 0x6061
        self.echo_torque = echo_torque   # torque_actual := the torque_offset received this cycle
        self.alpha = 1 - np.exp(-cfg.bus.cycle_time_s / lag_s)
        q0 = np.zeros(self.n) if q0 is None else np.asarray(q0, float)
        self.pos = q0 / self.units.rad_per_count          # counts, bus order == joint order here
        self.state = ["disabled"] * self.n
        self.prev_cw = np.zeros(self.n, int)
        self.err = np.zeros(self.n, int)
        self.k_enabled = -1
        self.drop = 0
        self.silent = set()
        self.frozen = set()
        self.torque_pm = {}
        self.warn = set()
        self.jump = {}
        self.emcy = {}          # slave -> queued CoE emergencies (kind "emcy": code)
        if start_fault is not None:      # (slave, error code): in FAULT before the run
            self.state[start_fault[0]] = "fault"
            self.err[start_fault[0]] = start_fault[1]
        self.inp = self.layout.decode(self.layout.encode_inputs(np.zeros(self.n, self.layout.tx)))

    def open(self):
        time.sleep(self.open_delay_s)

    def close(self):
        pass

    def slave_names(self):
        return [f"fake{k}" for k in range(self.n)]

    def al_report(self):
        return "fake bus"

    def read_states(self):
        return [(0 if k in self.silent else 8, 0) for k in range(self.n)]

    def al_faults(self):
        return None

    def read_emergencies(self, k):
        out, self.emcy[k] = self.emcy.get(k, []), []
        return out

    def bus_report(self):
        return {"iface": "fake", "slaves": [{"position": k + 1} for k in range(self.n)]}

    def lost_slaves(self):
        return [f"slave {k + 1} ({self.cfg.drives[k].joint})" for k in sorted(self.silent)]

    def _fsa(self, k, cw):
        st, prev = self.state[k], self.prev_cw[k]
        if st == "fault":
            return "disabled" if (cw & 0x80) and not (prev & 0x80) else st
        if st == "quickstop":
            return st
        if (cw & 0x02) == 0:
            return "disabled"
        if st == "disabled" and (cw & 0x87) == 0x06:
            return "ready"
        if st == "ready" and (cw & 0x8F) == 0x07:
            return "on"
        if st in ("on", "ready") and (cw & 0x8F) == 0x0F:
            return "enabled"
        if st == "enabled" and (cw & 0x8F) == 0x07:
            return "on"
        if st in ("on", "enabled") and (cw & 0x87) == 0x06:
            return "ready"
        return st

    def exchange(self, out):
        cw = out["controlword"].astype(int)
        tgt = out["target_position"].astype(float)
        if any(s == "enabled" for s in self.state) and self.k_enabled < 0:
            self.k_enabled = 0
        if self.k_enabled >= 0:
            for f in self.faults:
                if f["at"] == self.k_enabled:
                    if f["kind"] == "drive_fault":
                        self.state[f["slave"]] = "fault"
                        self.err[f["slave"]] = 0x7500
                    elif f["kind"] == "drop_frames":
                        self.drop = f["count"]
                    elif f["kind"] == "stop_answering":
                        self.silent.add(f["slave"])
                    elif f["kind"] == "stall":
                        time.sleep(f["seconds"])
                    elif f["kind"] == "freeze":
                        self.frozen.add(f["slave"])
                    elif f["kind"] == "emcy":
                        self.emcy.setdefault(f["slave"], []).append(
                            {"slave": f["slave"] + 1, "joint": self.cfg.drives[f["slave"]].joint,
                             "error_code": f["code"], "error_register": 0x08, "data": [0, 0, 0],
                             "k_enabled": self.k_enabled})
                    elif f["kind"] == "overtorque":
                        self.torque_pm[f["slave"]] = f["permille"]
                    elif f["kind"] == "warning":
                        self.warn.add(f["slave"])
                    elif f["kind"] == "jump":
                        self.pos[f["slave"]] += f["rad"] / self.units.rad_per_count[f["slave"]]
                    elif f["kind"] in ("sto", "quick_stop"):
                        self.state[f["slave"]] = "disabled" if f["kind"] == "sto" else "quickstop"
            self.k_enabled += 1
        if self.drop > 0:
            self.drop -= 1
            return -1, self.inp.copy()
        new = self.inp.copy()
        for k in range(self.n):
            if k in self.silent:
                continue
            self.state[k] = self._fsa(k, cw[k])
            self.prev_cw[k] = cw[k]
            if self.state[k] == "enabled" and k not in self.frozen:
                self.pos[k] += self.alpha * (tgt[k] - self.pos[k])
            new[k]["statusword"] = SW[self.state[k]] | (0x80 if k in self.warn else 0)
            new[k]["position_actual"] = int(round(self.pos[k]))
            new[k]["error_code"] = self.err[k]
            new[k]["modes_of_operation_display"] = 0 if self.ignore_mode else out[k]["modes_of_operation"]
            new[k]["torque_actual"] = (self.torque_pm[k] if k in self.torque_pm else
                                       out[k]["torque_offset"] if self.echo_torque else 10 * (k + 1))
            new[k]["current_actual"] = -5 * (k + 1)
            new[k]["joint_torque"] = 1000 * (k + 1)
        self.inp = new
        wkc = self.expected_wkc - 3 * len(self.silent)
        return wkc, new.copy()
