"""The twin as EtherCAT slaves: N emulated CiA 402 servo drives on a network interface,
answering a real EtherCAT master (SOEM / pysoem) with the motion of the PyBullet twin.

Usage::

    from twin.ethercat import SlaveChainProcess
    proc = SlaveChainProcess(iface="ecs0", config="assets/cobot6_ethercat.yaml",
                             urdf="assets/cobot6.urdf", drives="assets/cobot6_drives.yaml",
                             twin_settings={"seed": 0},       # TwinSettings keys, plus "motion", "q0"
                             n_slaves=None)                   # None -> one drive per config entry
    proc.start()                      # own OS process (entry point twin.ethercat.child); returns
                                      # once it listens on the interface
    proc.inject("drive_fault", slave=2)          # slave = 0-based bus position (= joint index)
    proc.status(); proc.truth(); proc.stop()

Time base: the twin advances one 1 ms step per process-data frame (one with an LRW or LWR
datagram), after the
answer has been sent; the inputs in the answer to frame k are the state after step k-1.

Faults (:meth:`SlaveChainProcess.inject`): "drive_fault" (slave, code=0x2310: CiA 402 fault,
error code in 0x603F, a CoE emergency queued in the mailbox, the joint holds), "sto" (slave: safe
torque off, SWITCH ON DISABLED until "clear"), "quick_stop" (slave: drive-side quick stop, QUICK
STOP ACTIVE for 10 cycles, then SWITCH ON DISABLED), "ignore_mode" (slave: 0x6061 stays 0),
"al_error" (slave, code=0x001B, state=SAFEOP), "set_object" (slave, index, sub, value: e.g. wrong
units), "drop_frames" (count: no answer), "corrupt_frames" (count: CRC error at the slaves -- the
frame returns unprocessed, garbled, working counter 0, RX error counter 0x0300 counts),
"stop_answering" / "resume_answering" (slave: that ESC neither processes nor counts), "sdo_abort"
(index, code=0x08000020, slave=None -> all: any SDO access to the object is aborted),
"wrong_identity" (slave, vendor_id/product_code; default product + 1, seen at the next bring-up),
"freeze_encoder" (slave: 0x6064 keeps its value while the axis moves on), "warning" (slave:
statusword bit 7 set), "swap_serials" (slaves [a, b]: swapped identical drives), "set_alias" (slave,
alias: configured station alias in SII word 4 and register 0x0012), "emergency"
(slave, code=0x2310, warning=False: a CoE emergency the drive reports without reacting, the axis
keeps its state; an error sets the error register 0x1001 -- generic + class bit, PDO-mappable --
until a fault reset, a warning leaves it), "clear". The drives hold their motor torque to max
torque 0x6072. Built in: process-data (SyncManager) watchdog (``watchdog_s`` = initial value of
registers 0x0400/0x0420, which the master reprograms; AL code 0x001B; every expiry is logged with
its time and the time of the last outputs), following-error fault 0x8611 (window 0x6065), leaving
OP while enabled faults 0x8700, distributed clocks (receive-time latch, system time/offset, SYNC0
registers stored and reported), units objects 0x608F/0x6091/0x6092/0x6076 (motor side)/0x2003,
a per-drive state-transition log (cycle, time, from, to) in :meth:`SlaveChainProcess.status`.

Modules: frames (frame/datagram codec), sii (EEPROM image), coe (object dictionary, SDO server),
drive (CiA 402 state machine, CSP, bus scaling), esc (registers, SyncManagers, FMMUs, AL state
machine), chain (the line of slaves, addressing, working counters, fault injection), motion
(twin / follower), server (raw socket loop, :class:`SlaveChainProcess`), bench (latency
benchmark). CLI: ``python -m twin.ethercat --iface ecs0 --config assets/cobot6_ethercat.yaml
--urdf ... --drives ...``.
"""
from .chain import FAULT_KINDS, SlaveChain
from .config import SlaveConfig, load_slave_config
from .server import SlaveChainProcess, serve

__all__ = ["SlaveChainProcess", "SlaveChain", "SlaveConfig", "load_slave_config", "serve", "FAULT_KINDS"]
