"""Declarative PDO layout -> numpy structured dtype (compiled once) + the SDO writes that assign it.

The layout comes from the ``pdo`` section of the drive configuration. ``PdoLayout`` packs the
entries little-endian without padding, exactly as EtherCAT maps them, so a whole cycle's process
image for all drives is one ``np.frombuffer`` (inputs) / one ``tobytes`` (outputs) -- no per-field
``struct`` calls in the cyclic loop.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from robot.config import TYPES, EthercatConfig, PdoEntry

SM2_ASSIGN, SM3_ASSIGN = 0x1C12, 0x1C13   # SyncManager 2 (outputs) / 3 (inputs) PDO assignment


def compile_dtype(entries: tuple[PdoEntry, ...]) -> np.dtype:
    """Packed little-endian structured dtype with one field per entry, in mapping order."""
    return np.dtype([(e.name, TYPES[e.type][0]) for e in entries])


@dataclass(frozen=True)
class PdoLayout:
    """Compiled process-data layout of one drive.

    rx: outputs (master -> drive); tx: inputs (drive -> master). Sizes in bytes per drive.
    """
    rx_index: int
    tx_index: int
    rx_entries: tuple[PdoEntry, ...]
    tx_entries: tuple[PdoEntry, ...]
    rx: np.dtype
    tx: np.dtype

    @staticmethod
    def from_config(cfg: EthercatConfig) -> "PdoLayout":
        return PdoLayout(cfg.rx_pdo, cfg.tx_pdo, cfg.rx_entries, cfg.tx_entries,
                         compile_dtype(cfg.rx_entries), compile_dtype(cfg.tx_entries))

    @property
    def rx_size(self) -> int:
        return self.rx.itemsize

    @property
    def tx_size(self) -> int:
        return self.tx.itemsize

    # -- codec --------------------------------------------------------------------------------
    def new_outputs(self, n_drives: int) -> np.ndarray:
        """Zeroed output records, shape (n_drives,), dtype rx."""
        return np.zeros(n_drives, dtype=self.rx)

    def encode(self, outputs: np.ndarray) -> list[bytes]:
        """Output records (n_drives,) -> one bytes object per drive (exactly rx_size bytes each)."""
        if outputs.dtype != self.rx:
            raise TypeError(f"outputs have dtype {outputs.dtype}, expected the rx layout {self.rx}")
        raw = outputs.tobytes()
        s = self.rx_size
        return [raw[k * s:(k + 1) * s] for k in range(outputs.shape[0])]

    def decode(self, inputs: list[bytes] | bytes) -> np.ndarray:
        """Per-drive input bytes (or their concatenation) -> records (n_drives,), dtype tx."""
        raw = b"".join(inputs) if isinstance(inputs, (list, tuple)) else bytes(inputs)
        if len(raw) % self.tx_size:
            raise ValueError(f"input process image of {len(raw)} bytes is not a multiple of the "
                             f"tx layout size {self.tx_size}")
        return np.frombuffer(raw, dtype=self.tx).copy()

    def encode_inputs(self, records: np.ndarray) -> list[bytes]:
        """The drive side of the codec (tests, emulators): tx records -> bytes per drive."""
        raw = np.asarray(records, dtype=self.tx).tobytes()
        s = self.tx_size
        return [raw[k * s:(k + 1) * s] for k in range(len(records))]

    def decode_outputs(self, outputs: list[bytes] | bytes) -> np.ndarray:
        """The drive side of the codec: output bytes -> rx records."""
        raw = b"".join(outputs) if isinstance(outputs, (list, tuple)) else bytes(outputs)
        return np.frombuffer(raw, dtype=self.rx).copy()

    # -- validation ---------------------------------------------------------------------------
    def validate_sizes(self, out_sizes: list[int], in_sizes: list[int]) -> None:
        """Check every drive's mapped process image (bytes) against the layout; the message
        names the slave (1-based bus position) and both sizes."""
        for k, (o, i) in enumerate(zip(out_sizes, in_sizes)):
            if o != self.rx_size or i != self.tx_size:
                raise RuntimeError(
                    f"slave {k + 1}: mapped process image is {o} output / {i} input bytes, the "
                    f"configured PDO layout needs {self.rx_size} / {self.tx_size} "
                    f"(rx {self.rx_index:#06x}, tx {self.tx_index:#06x})")

    # -- PDO assignment SDOs ------------------------------------------------------------------
    def assignment_sdos(self, complete_access: bool = False) -> list[tuple[int, int, bytes, bool]]:
        """CoE writes (index, sub, data, complete_access) that map and assign rx/tx in PREOP.

        Sequential mode uses expedited downloads only: clear the assignment, clear the mapping,
        write each 32-bit mapping entry, set the entry count, assign, set the assignment count.
        Complete-access mode writes each object in one go (sub 0 as U8 + pad byte, as SOEM does).
        """
        out: list[tuple[int, int, bytes, bool]] = []
        for sm, pdo, entries in ((SM2_ASSIGN, self.rx_index, self.rx_entries),
                                 (SM3_ASSIGN, self.tx_index, self.tx_entries)):
            words = [e.mapping_word for e in entries]
            if complete_access:
                out.append((pdo, 0, struct.pack(f"<Bx{len(words)}I", len(words), *words), True))
                out.append((sm, 0, struct.pack("<BxH", 1, pdo), True))
            else:
                out.append((sm, 0, struct.pack("<B", 0), False))
                out.append((pdo, 0, struct.pack("<B", 0), False))
                out += [(pdo, k + 1, struct.pack("<I", w), False) for k, w in enumerate(words)]
                out.append((pdo, 0, struct.pack("<B", len(words)), False))
                out.append((sm, 1, struct.pack("<H", pdo), False))
                out.append((sm, 0, struct.pack("<B", 1), False))
        return out


def pack_sdo_value(type_name: str, value: int) -> bytes:
    """A scalar startup-SDO value -> its little-endian bytes."""
    return np.array([value], dtype=TYPES[type_name][0]).tobytes()
