"""The dry-run bus report as text: slaves, identities, AL states, PDO sizes, distributed clocks,
SyncManager watchdogs, units read from the drives, RT settings of the loop process."""
from __future__ import annotations


def format_bus_report(rep: dict) -> str:
    """`rep`: robot.bus.EthercatBus.bus_report() plus "rt" (robot.rt.harden) -> lines of text."""
    if not rep or not rep.get("slaves"):
        return "EtherCAT bus report: no bus data (offline dry run: the bus was not touched)"
    dc = rep.get("distributed_clocks")
    lines = [f"EtherCAT bus report: interface {rep.get('iface')}, {len(rep['slaves'])} slaves, "
             f"cycle {1e3 * rep.get('cycle_time_s', 0):g} ms, expected working counter "
             f"{rep.get('expected_wkc')}, receive timeout {rep.get('receive_timeout_us')} us",
             "distributed clocks: " + (f"on, SYNC0 every cycle, shift {1e6 * rep['sync0_shift_s']:g} us"
                                       if dc else "off")]
    for s in rep["slaves"]:
        u = s.get("units") or {}
        unit = ""
        if u:
            per = (u["encoder_increments"] / u["encoder_motor_revs"]
                   if u.get("encoder_increments") and u.get("encoder_motor_revs") else None)
            gear = (u["gear_motor_revs"] / u["gear_shaft_revs"]
                    if u.get("gear_motor_revs") and u.get("gear_shaft_revs") else None)
            src = {1: "motor", 2: "link"}.get(u.get("position_source"), "?")
            unit = (f"; units read: encoder {per:.6g} counts/motor rev" if per else "; units read: -")
            unit += f", gear {gear:g}" if gear else ""
            unit += f", position from the {src} encoder"
            unit += f", rated torque {u['rated_torque_mNm']} mN*m (motor)" if u.get("rated_torque_mNm") else ""
            unit += f", following error window {u.get('following_error_window_counts')} counts"
            if u.get("skipped_optional"):
                unit += f", optional objects absent: {', '.join(u['skipped_optional'])}"
            if u.get("notes"):
                unit += f" ({'; '.join(u['notes'])})"
        lines.append(f"  {s['position']}. {s['joint']:8s} '{s['name']}' vendor {s['vendor_id']} product "
                     f"{s['product_code']} rev {s['revision']}: {s['state']}, AL status code "
                     f"{s['al_status_code']}, PDO {s['output_bytes']} out / {s['input_bytes']} in bytes, "
                     f"SM watchdog {s['watchdog_ms']:g} ms{unit}")
    rt = rep.get("rt") or {}
    if rt:
        lines.append(f"loop process: SCHED_FIFO {'yes' if rt.get('sched_fifo') else 'NO'}, mlockall "
                     f"{'yes' if rt.get('mlockall') else 'no'}, CPU {rt.get('affinity')}, gc off, CPU wake-up "
                     f"latency {'0 us' if rt.get('cpu_latency_pinned') else 'not pinned'}")
        lines += [f"  warning: {w}" for w in rt.get("warnings", [])]
    return "\n".join(lines)
