"""Symbolic (CasADi SX) rigid-body regressor of a serial revolute chain.

tau = Y(q, qd, qdd) p with p the 10n standard parameters (per link
[m, mcx, mcy, mcz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz] in the link frame, inertia about its origin).

Derivation (Newton-Euler in link frames, Khalil/Atkeson style): the forward pass gives each link's
angular velocity w, angular acceleration wd and origin acceleration a (gravity entering as a base
acceleration -g). The link's wrench about its origin is linear in its parameters:
    f = a m + (S(wd) + S(w)^2) h,                 h = m c
    n = -S(a) h + (L(wd) + S(w) L(w)) Ibar,       I w = L(w) Ibar
so the 6x10 block A_i(w, wd, a) maps link i's parameters to its wrench. The backward pass carries
the blocks down the chain (f_{i-1} += R f_i, n_{i-1} += R n_i + p x R f_i) and row i of Y is the
joint axis component of the accumulated moment at joint i.

The expression graph is built once per model; numerical evaluation over N samples uses CasADi's
`map` (one call, no Python loop over samples).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import casadi as ca
import numpy as np

from identify.common import interrupts, progress
from identify.common.fileio import atomic_write_text, usable_cache

from .spatial import axis_rotation


def _cross(a, b):
    return ca.vertcat(a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _skew(v):
    return ca.vertcat(ca.horzcat(0, -v[2], v[1]), ca.horzcat(v[2], 0, -v[0]),
                      ca.horzcat(-v[1], v[0], 0))


def _L(w):
    z = 0
    return ca.vertcat(ca.horzcat(w[0], w[1], z, w[2], z, z),
                      ca.horzcat(z, w[0], w[1], z, w[2], z),
                      ca.horzcat(z, z, z, w[0], w[1], w[2]))


def _rotations(placements: np.ndarray, axes: np.ndarray, q):
    """Per joint: (R, p) of frame i in frame i-1 as CasADi expressions."""
    out = []
    for i in range(placements.shape[0]):
        Rq = _sx_matrix(axis_rotation(axes[i], q[i], xp=ca))
        R = ca.mtimes(ca.DM(placements[i, :3, :3]), Rq)
        out.append((R, ca.DM(placements[i, :3, 3])))
    return out


def _sx_matrix(rows):
    return ca.vertcat(*[ca.horzcat(*r) for r in rows])


def _forward_pass(Rp, axes: np.ndarray, gravity: np.ndarray, qd, qdd=None) -> list:
    """Newton-Euler forward pass: per link i, (w, wd, a) in frame i -- angular velocity,
    angular acceleration and the linear acceleration of the frame origin, gravity entering as a
    base acceleration -g. Rp: per joint (R, p) of frame i in frame i-1 (:func:`_rotations`);
    qdd None: zero joint accelerations (the bias terms)."""
    w = ca.SX.zeros(3)
    wd = ca.SX.zeros(3)
    a = ca.SX(ca.DM(-np.asarray(gravity, dtype=float)))
    out = []
    for i, (R, p) in enumerate(Rp):
        Rt = R.T
        z = ca.DM(axes[i])
        a = ca.mtimes(Rt, a + _cross(wd, p) + _cross(w, _cross(w, p)))
        w_in = ca.mtimes(Rt, w)
        w = w_in + z * qd[i]
        if qdd is None:
            wd = ca.mtimes(Rt, wd) + _cross(w_in, z * qd[i])
        else:
            wd = ca.mtimes(Rt, wd) + z * qdd[i] + _cross(w_in, z * qd[i])
        out.append((w, wd, a))
    return out


def build_bias(placements: np.ndarray, axes: np.ndarray, gravity: np.ndarray) -> ca.Function:
    """CasADi Function h(q, v, theta) = C(q, v) v + g(q) (n,) [N*m] of a serial revolute chain by
    the recursive Newton-Euler algorithm, with the standard parameters theta (10n,; per link
    [m, mcx, mcy, mcz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz] in the link frame, inertia about its origin)
    as an input.

    Same kinematics as :func:`build_regressor`, so h = Y(q, v, 0) theta -- but ~5x fewer
    operations than the regressor times theta (the twin's compiled 1 kHz step pays it every
    period). Per link: wrench about the origin f = a m + wd x c + w x (w x c), c = m r_c,
    n = c x a + I wd + w x (I w); backward pass F_i = f_i + R F_{i+1},
    N_i = n_i + R N_{i+1} + p x (R F_{i+1}); h_i = z_i . N_i."""
    n = placements.shape[0]
    q, v, th = ca.SX.sym("q", n), ca.SX.sym("v", n), ca.SX.sym("theta", 10 * n)
    Rp = _rotations(placements, axes, q)
    wrench = []
    for i, (w, wd, a) in enumerate(_forward_pass(Rp, axes, gravity, v)):
        t = th[10 * i:10 * i + 10]
        m, c = t[0], t[1:4]
        I = ca.vertcat(ca.horzcat(t[4], t[5], t[7]), ca.horzcat(t[5], t[6], t[8]),
                       ca.horzcat(t[7], t[8], t[9]))
        f = a * m + _cross(wd, c) + _cross(w, _cross(w, c))
        nm = _cross(c, a) + ca.mtimes(I, wd) + _cross(w, ca.mtimes(I, w))
        wrench.append((f, nm))
    h = [None] * n
    F, N = wrench[n - 1]
    h[n - 1] = ca.dot(ca.DM(axes[n - 1]), N)
    for i in range(n - 2, -1, -1):
        R, p = Rp[i + 1]
        RF = ca.mtimes(R, F)
        F = wrench[i][0] + RF
        N = wrench[i][1] + ca.mtimes(R, N) + _cross(p, RF)
        h[i] = ca.dot(ca.DM(axes[i]), N)
    return ca.Function("h", [q, v, th], [ca.vertcat(*h)], ["q", "v", "theta"], ["h"])


def build_regressor(placements: np.ndarray, axes: np.ndarray, gravity: np.ndarray) -> ca.Function:
    """CasADi Function Y(q, qd, qdd) -> (n, 10n) for a chain (see module docstring).

    Args:
        placements: (n, 4, 4) joint frame poses in the parent joint frame at q = 0.
        axes: (n, 3) unit joint axes in each joint frame.
        gravity: (3,) gravity vector in the base frame [m/s^2].
    """
    n = placements.shape[0]
    q, qd, qdd = ca.SX.sym("q", n), ca.SX.sym("qd", n), ca.SX.sym("qdd", n)
    Rp = _rotations(placements, axes, q)
    blocks = []
    for w, wd, a in _forward_pass(Rp, axes, gravity, qd, qdd):
        Sw, Swd = _skew(w), _skew(wd)
        top = ca.horzcat(a, Swd + ca.mtimes(Sw, Sw), ca.SX.zeros(3, 6))
        bot = ca.horzcat(ca.SX.zeros(3, 1), -_skew(a), _L(wd) + ca.mtimes(Sw, _L(w)))
        blocks.append((top, bot))
    # backward pass: F[j] / N[j] hold the force/moment of links >= i due to link j's parameters,
    # expressed in frame i.
    Y = ca.SX.zeros(n, 10 * n)
    F: dict[int, ca.SX] = {}
    Nm: dict[int, ca.SX] = {}
    for i in range(n - 1, -1, -1):
        if i < n - 1:
            R, p = Rp[i + 1]
            for j in list(F):
                f = ca.mtimes(R, F[j])
                Nm[j] = ca.mtimes(R, Nm[j]) + ca.mtimes(_skew(p), f)
                F[j] = f
        F[i], Nm[i] = blocks[i]
        z = ca.DM(axes[i]).T
        for j in F:
            Y[i, 10 * j:10 * (j + 1)] = ca.mtimes(z, Nm[j])
    return ca.Function("Y", [q, qd, qdd], [Y], ["q", "qd", "qdd"], ["Y"])


def build_link_origins(placements: np.ndarray, axes: np.ndarray) -> ca.Function:
    """CasADi Function q (n,) -> (3, n+1): base origin then each joint frame origin [m]."""
    n = placements.shape[0]
    q = ca.SX.sym("q", n)
    R_w = ca.SX.eye(3)
    p_w = ca.SX.zeros(3)
    cols = [p_w]
    for i, (R, p) in enumerate(_rotations(placements, axes, q)):
        p_w = p_w + ca.mtimes(R_w, p)
        R_w = ca.mtimes(R_w, R)
        cols.append(p_w)
    return ca.Function("origins", [q], [ca.horzcat(*cols)], ["q"], ["p"])


def _cache_dir() -> Path | None:
    """The code-generation cache (``<cache root>/codegen``), or None when it cannot be written
    (then the model runs in CasADi's virtual machine; one warning)."""
    return usable_cache("codegen", "the model is evaluated in CasADi's virtual machine "
                                   "(about 20x slower) and not compiled to C")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(so: Path) -> bool:
    """True when the compiled library matches the size and SHA-256 recorded at build time
    (``<so>.json``). A truncated or corrupted library is never handed to dlopen (it would crash
    the process with SIGBUS); a wrong one is removed so it gets rebuilt."""
    manifest = so.with_suffix(".json")
    try:
        rec = json.loads(manifest.read_text())
        ok = (so.stat().st_size == int(rec["size"]) and _digest(so) == rec["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        for p in (so, manifest):
            try:
                p.unlink()
            except OSError:
                pass
    return ok


_announced = {"compile": False}


def is_compiled(f: ca.Function) -> bool:
    """True when :func:`compile_function` of `f` needs no C compiler run: its library is in the
    code-generation cache (not verified here: that is done when it is loaded), or there is no
    cache to compile into (the virtual machine is used)."""
    folder = _cache_dir()
    if folder is None:
        return True
    key = hashlib.sha256(f.serialize().encode()).hexdigest()[:20]
    return (folder / f"{f.name()}_{key}.so").is_file()


def compile_function(f: ca.Function) -> ca.Function:
    """The same Function as generated C compiled with the system C compiler (cached on disk,
    keyed by the function's serialized graph, verified by size and SHA-256 before loading).
    Falls back to CasADi's virtual machine -- with a warning naming the function -- when no
    compiler is available, compiling fails or the cache folder cannot be written."""
    key = hashlib.sha256(f.serialize().encode()).hexdigest()[:20]
    folder = _cache_dir()
    if folder is None:
        return f
    so = folder / f"{f.name()}_{key}.so"
    if not (so.exists() and _verified(so)):
        cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
        if cc is None or shutil.which(cc) is None:
            warnings.warn(f"no C compiler found{f' (CC={cc!r})' if cc else ''}: evaluating CasADi "
                          f"function {f.name()!r} in the virtual machine (about 20x slower)",
                          RuntimeWarning, stacklevel=2)
            return f
        if not _announced["compile"]:
            _announced["compile"] = True
            progress.message(f"compiling the arm model to C (once per model and machine; cached "
                             f"in {folder}) ...")
        t0 = time.perf_counter()
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src = f"{f.name()}_{key}.c"
            cg = ca.CodeGenerator(src, {"with_header": False})
            cg.add(f)
            cg.generate(tmp + os.sep)
            tmp_so = Path(tmp) / so.name
            try:
                # own process group, killed whole on an interrupt (no orphaned cc1)
                res = interrupts.run_group([cc, "-O2", "-shared", "-fPIC", str(Path(tmp) / src),
                                            "-o", str(tmp_so), "-lm"])
                err = res.stderr.strip()[:300] if res.returncode != 0 else None
            except OSError as exc:
                err = str(exc)
            if err is not None:
                warnings.warn(f"compiling CasADi function {f.name()!r} with {cc} failed ({err}); "
                              f"using the virtual machine", RuntimeWarning, stacklevel=2)
                return f
            rec = {"size": tmp_so.stat().st_size, "sha256": _digest(tmp_so), "function": f.name()}
            # the manifest first, then the library: both atomic, so a reader sees either no
            # library or one whose record is already there
            atomic_write_text(so.with_suffix(".json"), json.dumps(rec))
            os.replace(tmp_so, so)
        progress.message(f"   compiled {f.name()!r} to C in {time.perf_counter() - t0:.1f} s")
    return ca.external(f.name(), str(so))


class BatchEvaluator:
    """Evaluates a Function of column-vector inputs over N samples without a Python loop over
    samples: a compiled copy mapped over fixed-size chunks, reading/writing numpy memory directly.

    Call with arrays (N, k_i); returns (N, rows, cols) of the single output.
    """

    def __init__(self, f: ca.Function, chunk: int = 2048, compiled: bool = True):
        self.f = f
        self.rows, self.cols = f.size_out(0)
        self.chunk = chunk
        self._fc = compile_function(f) if compiled else f
        self._maps: dict[int, ca.Function] = {}

    def _map(self, size: int) -> ca.Function:
        if size not in self._maps:
            self._maps[size] = self._fc.map(size, "serial")
        return self._maps[size]

    def __call__(self, *args: np.ndarray) -> np.ndarray:
        N = args[0].shape[0]
        # CasADi reads column-major: a C-contiguous (N, k) array is the k x N matrix it wants,
        # and its (rows x cols*N) output is a C array (N, cols, rows).
        ins = [np.ascontiguousarray(a, dtype=float) for a in args]
        out = np.empty((N, self.cols, self.rows))
        start = 0
        while start < N:
            left = N - start
            # map sizes are powers of two up to `chunk` (few distinct maps to build and cache);
            # a short tail is padded rather than given a map of its own
            size = self.chunk if left >= self.chunk else 1 << (left - 1).bit_length()
            take = min(size, left)
            if take == size:
                args_k = [a[start:start + size] for a in ins]
                out_k = out[start:start + size]
            else:
                args_k = [np.concatenate([a[start:], np.repeat(a[-1:], size - take, 0)]) for a in ins]
                out_k = np.empty((size, self.cols, self.rows))
            buf, run = self._map(size).buffer()
            for i, a in enumerate(args_k):
                buf.set_arg(i, memoryview(a))
            buf.set_res(0, memoryview(out_k))
            run()
            if take != size:
                out[start:] = out_k[:take]
            start += take
        return out.transpose(0, 2, 1)
