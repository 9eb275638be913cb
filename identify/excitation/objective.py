"""The smooth conditioning objective J = [log tr(M^r) + log tr(M^-r)] / r and the NLP IPOPT
solves: objective and exact gradient as generated C + numpy (:class:`_FastObjective`), or the
CasADi graph for exact Hessians, with the limit and table-plane constraints on the grid."""
from __future__ import annotations
import hashlib
import math
import time
from dataclasses import dataclass, field
import casadi as ca
import numpy as np
from identify.common import interrupts
from .iterations import IterationCallback
from .cache import problem_key
from .conditioning import base_regressor_function
from .parametrization import free_basis, states_on_grid
from .problem import ExcitationProblem, rms_bounds, resolve_start, scaled_limits


# ------------------------------------------------------------------------------------------------
# the NLP
# ------------------------------------------------------------------------------------------------
@dataclass
class NLP:
    """The built IPOPT problem of an ExcitationProblem (:func:`build_nlp`): the solver, the
    bounds of its constraint rows g (lbg, ubg) and variables (lbx, ubx), g and f as CasADi
    Functions of x, and per row what the screening (identify.excitation.optimizer) and the
    error messages need."""
    solver: ca.Function
    lbg: np.ndarray
    ubg: np.ndarray
    lbx: np.ndarray
    ubx: np.ndarray
    groups: list          # (label, joint index, slice into g, kind) for error messages
    g_fun: ca.Function
    f_fun: ca.Function
    bp: object
    build_time_s: float
    keep: object = None   # the objective callback (must outlive the solver)
    symbols: tuple = ()   # (x, f, G) MX expressions and the IPOPT options, for row-screened solvers
    opts: dict | None = None
    linear: np.ndarray | None = None   # (rows,) bool: a linear q/qd/qdd limit row
    sample: np.ndarray | None = None   # (rows,) grid sample index of the row within its group
    subs: dict | None = None           # screened solvers by row selection
    kinds: np.ndarray | None = None    # (rows,) kind of each row: q qd qdd z col tau rms
    callbacks: list | None = None      # constraint-row callbacks (must outlive the solver)
    parts: list | None = None          # per group: its MX rows (G = vertcat(parts))
    sources: list | None = None        # per group: None or (_SampleRows, first row, sign)

    def sub_solver(self, keep: np.ndarray | None, warm: bool = False) -> ca.Function:
        """IPOPT solver of the same problem with only the constraint rows `keep` (bool mask;
        None: all rows). warm: started from the previous solve's primal-dual point (the caller
        passes x0, lam_g0, lam_x0) with a small barrier parameter, instead of pushing the
        iterate back into the interior (a cold re-solve spent ~80 iterations to come back to
        where the previous one ended)."""
        key = ("all" if keep is None else hashlib.sha1(np.packbits(keep).tobytes()).hexdigest(),
               bool(warm))
        if key == ("all", False):
            return self.solver
        if self.subs is None:
            self.subs = {}
        if key not in self.subs:
            if len(self.subs) > 16:
                self.subs.clear()
            x, f, G = self.symbols
            g, cbs = (G, []) if keep is None else self._kept_rows(keep)
            opts = dict(self.opts)
            if warm:
                opts.update(WARM_START_OPTIONS)
            it_cb = IterationCallback("iterations", x.shape[0], g.shape[0])
            opts["iteration_callback"] = it_cb
            self.subs[key] = (ca.nlpsol("excitation_screened", "ipopt", {"x": x, "f": f, "g": g},
                                        opts), cbs + [it_cb])
        return self.subs[key][0]

    def _kept_rows(self, keep: np.ndarray):
        """(MX of the rows `keep` in G's order, the callbacks behind them). Rows computed by a
        sample-row callback come from a new callback evaluating only the kept rows
        (_RowSubset); other rows are selected from their MX expressions."""
        x = self.symbols[0]
        picked, subsets = [], {}
        for gi, (_, _, sl, _) in enumerate(self.groups):
            k = np.flatnonzero(keep[sl])
            src = self.sources[gi] if self.sources else None
            picked.append(k)
            if src is not None and k.size:
                subsets.setdefault(id(src[0]), (src[0], []))[1].append(src[1] + k)
        outs, cbs = {}, []
        for key, (rows, idx) in subsets.items():
            cb = _RowsCallback("rows_subset", rows.subset(np.concatenate(idx)), x.shape[0])
            cbs.append(cb)
            outs[key] = [cb(x), 0]
        g = []
        for gi, k in enumerate(picked):
            if not k.size:
                continue
            src = self.sources[gi] if self.sources else None
            if src is None:
                g.append(self.parts[gi][[int(i) for i in k]])
            else:
                out = outs[id(src[0])]
                g.append(src[2] * out[0][out[1]:out[1] + k.size])
                out[1] += k.size
        return (ca.vertcat(*g) if g else ca.MX(0, 1)), cbs


#: IPOPT options of a warm-started re-solve (see NLP.sub_solver)
WARM_START_OPTIONS = {"ipopt.warm_start_init_point": "yes", "ipopt.mu_init": 1e-4,
                      "ipopt.warm_start_bound_push": 1e-6, "ipopt.warm_start_bound_frac": 1e-6,
                      "ipopt.warm_start_slack_bound_push": 1e-6,
                      "ipopt.warm_start_slack_bound_frac": 1e-6,
                      "ipopt.warm_start_mult_bound_push": 1e-6,
                      # it starts at a converged point: stop 3 (not 10) acceptable iterations
                      # after the new rows hold
                      "ipopt.acceptable_iter": 3}


_NLP_CACHE: dict = {}
_COLLISION_CACHE: dict = {}


def collision_model(model, problem: ExcitationProblem):
    """The capsules, pairs and obstacles of `problem` (identify.model.collision.ArmCapsules),
    without the pairs closer than the margin at the start pose (free start joints at the middle
    of their range, clipped to +-pi): the arm stands there, so such a pair is an overlap of the
    model's geometry. None when no pair is left to check (e.g. one moving joint without
    obstacles). Cached per model and settings."""
    from identify.model.collision import ArmCapsules
    key = (id(model), model.source, repr(problem.obstacles), problem.link_tubes,
           problem.collision_margin, problem.start_pose)
    if key not in _COLLISION_CACHE:
        q_start, free = resolve_start(model, problem)
        lim = scaled_limits(model, problem)
        mid = np.clip(np.nan_to_num(0.5 * (lim["q_min"] + lim["q_max"])), -math.pi, math.pi)
        q_ref = np.where(free, mid, q_start)
        ac = ArmCapsules.of_model(model, problem.obstacles, link_tubes=problem.link_tubes)
        if len(_COLLISION_CACHE) > 8:
            _COLLISION_CACHE.clear()
        lo, hi = np.maximum(lim["q_min"], -math.pi), np.minimum(lim["q_max"], math.pi)
        q_rand = np.random.default_rng(0).uniform(lo, hi, (64, model.n))
        ac = ac.drop_close(q_ref, float(problem.collision_margin)).drop_constant(q_rand)
        _COLLISION_CACHE[key] = ac if ac.pair_labels() else None
    return _COLLISION_CACHE[key]


def _power_objective(M, p: int, r: int):
    """J = [log tr(M^r) + log tr(M^-r)] / r for a symmetric positive definite MX M (p x p).

    Overflow-safe for any power of two r: both M and M^-1 are normalised to unit trace before
    repeated squaring (their eigenvalues then lie in (0, 1]), and the scale is added back in logs.
    """
    Mn = M / ca.trace(M)                                  # eigenvalues sum to 1
    Mi = ca.solve(Mn, ca.MX.eye(p), "ldl", {})
    tr_i = ca.trace(Mi)
    Min = Mi / tr_i
    A, B = Mn, Min
    for _ in range(r.bit_length() - 1):
        A, B = ca.mtimes(A, A), ca.mtimes(B, B)
    return (ca.log(ca.trace(A)) + r * ca.log(tr_i) + ca.log(ca.trace(B))) / r


class _FastObjective:
    """J (module docstring) and its exact gradient w.r.t. the NLP variables, evaluated without
    CasADi's MX virtual machine: W_b^T per sample and its vector-Jacobian product come from
    generated C (identify.model.regressor.BatchEvaluator, cached on disk), M = W^T W, its eigenvalues and
    dJ/dM from numpy, the chain to the Fourier coefficients through the constant bases P, V, A.

    With lambda_k, u_k the eigenpairs of M, l_k = log(lambda_k / tr M) and w(+-r) = softmax(+-r l):
    J = [logsumexp(r l) + logsumexp(-r l)] / r and dJ/dM = U diag((w(+r) - w(-r)) / lambda) U^T
    (the trace terms cancel), dJ/dW^T_s = 2 dJ/dM W^T_s per sample s.
    """

    def __init__(self, model, problem: ExcitationProblem, bp, free, q_start, P, V, A,
                 information0=None):
        from identify.model.regressor import BatchEvaluator
        n, p = model.n, len(bp.independent)
        fb = base_regressor_function(model, bp, problem.terms, problem.coulomb_eps)
        q, qd, qdd = ca.SX.sym("q", n), ca.SX.sym("qd", n), ca.SX.sym("qdd", n)
        S = ca.SX.sym("S", p * n)
        Wt = fb(q, qd, qdd)
        val = ca.dot(ca.reshape(S, p, n), Wt)
        # BatchEvaluator writes nonzeros: both outputs made dense
        fwd = ca.Function("Wb_T_dense", [q, qd, qdd], [ca.densify(Wt)])
        vjp = ca.Function("Wb_T_vjp", [q, qd, qdd, S],
                          [ca.densify(ca.gradient(val, ca.vertcat(q, qd, qdd)))])
        self.fw = BatchEvaluator(fwd)           # (N, p, n)
        self.fv = BatchEvaluator(vjp)           # (N, 3n, 1)
        self.n, self.p, self.r = n, p, int(problem.objective_power)
        # D / A-optimal: information F = sum_s W_s^T diag(w^2) W_s (w = 1/noise std) scaled to a
        # run, plus the information already held (identify.excitation.information)
        from .information import noise_vector, prior_scale
        self.mode = problem.objective
        self.w = 1.0 / noise_vector(problem.noise_std, n)
        N = P.shape[0]
        self.fscale = float(problem.run_samples) / N if problem.run_samples else 1.0
        self.F0 = None if information0 is None else np.asarray(information0, float)
        sc = prior_scale(problem.theta_prior)
        self.s2 = np.ones(p) if sc is None else 1.0 / sc ** 2
        self.free = np.asarray(free, bool)
        self.q_start = np.asarray(q_start, float)
        self.P, self.V, self.A = P, V, A
        self._last = None

    def _states(self, x):
        return states_on_grid(x, self.q_start, self.free, self.P, self.V, self.A)  # (N, n) each

    def _forward(self, x):
        x = np.ascontiguousarray(x, float).reshape(-1)
        if self._last is not None and np.array_equal(self._last[0], x):
            return self._last
        q, qd, qdd = self._states(x)
        F = self.fw(q, qd, qdd)                                  # (N, p, n) = W_s^T
        if self.mode != "cond":
            self._last = self._forward_information(x, F, (q, qd, qdd))
            return self._last
        Fm = F.transpose(1, 0, 2).reshape(self.p, -1)
        M = Fm @ Fm.T
        lam, U = np.linalg.eigh(M)
        if not (np.all(np.isfinite(lam)) and lam[0] > 0):
            self._last = (x, np.nan, None, None, None, None, (q, qd, qdd))
            return self._last
        ell = np.log(lam / lam.sum())

        def lse(v):
            c = v.max()
            w = np.exp(v - c)
            return c + math.log(w.sum()), w / w.sum()
        r = self.r
        jp, wp = lse(r * ell)
        jm, wm = lse(-r * ell)
        J = (jp + jm) / r
        self._last = (x, J, F, U, lam, wp - wm, (q, qd, qdd))
        return self._last

    def _forward_information(self, x, F, states):
        """D-optimal J = -log det(F_tot) / p, dJ/dF = -F_tot^-1 / p; A-optimal
        J = log tr(S F_tot^-1 S), dJ/dF = -F^-1 S^2 F^-1 / tr(.), S^2 = diag(s2); with
        F_tot = F0 + fscale sum_s Fw_s Fw_s^T, Fw_s = W_s^T diag(w). Returns the cache tuple with
        G_F = dJ/dF_tot * fscale in place of (U, lam, dw)."""
        Fw = F * self.w[None, None, :]
        Fm = Fw.transpose(1, 0, 2).reshape(self.p, -1)
        M = self.fscale * (Fm @ Fm.T)
        if self.F0 is not None:
            M = M + self.F0
        try:
            L = np.linalg.cholesky(M)
        except np.linalg.LinAlgError:
            return (x, np.nan, None, None, None, None, states)
        Li = np.linalg.solve(L, np.eye(self.p))
        Minv = Li.T @ Li
        if self.mode == "d_optimal":
            J = -2.0 * float(np.sum(np.log(np.diag(L)))) / self.p
            G = -Minv / self.p
        else:
            B = Minv * self.s2[None, :]                          # Minv S^2
            f = float(np.sum(self.s2 * np.diag(Minv)))
            J = math.log(f)
            G = -(B @ Minv) / f
        return (x, J, Fw, ("info", self.fscale * G), None, None, states)

    def value(self, x) -> float:
        return float(self._forward(x)[1])

    def gradient(self, x) -> np.ndarray:
        x, J, F, U, lam, dw, (q, qd, qdd) = self._forward(x)
        if F is None:
            return np.full(x.shape, np.nan)
        if isinstance(U, tuple):                                 # D / A-optimal: F is Fw
            S = 2.0 * np.einsum("pq,sqn->snp", U[1], F) * self.w[None, :, None]
        else:
            G = (U * (dw / lam)) @ U.T                           # dJ/dM (p, p)
            S = 2.0 * np.einsum("pq,sqn->snp", G, F)             # seeds, column-major per sample
        adj = self.fv(q, qd, qdd, S.reshape(S.shape[0], -1))[:, :, 0]   # (N, 3n)
        n = self.n
        aq, av, aa = adj[:, :n], adj[:, n:2 * n], adj[:, 2 * n:]
        gX = aq.T @ self.P + av.T @ self.V + aa.T @ self.A       # (n, m)
        return np.concatenate([gX.reshape(-1), aq.sum(0)[self.free]])


class _ObjCallback(ca.Callback):
    """CasADi Function x -> J backed by :class:`_FastObjective` (gradient via get_jacobian)."""

    def __init__(self, name, obj: _FastObjective, nx: int, grad: bool = False, opts=None):
        ca.Callback.__init__(self)
        self.obj, self.nx, self.grad = obj, nx, grad
        self._jac = None
        self.construct(name, opts or {})

    def get_n_in(self):
        return 2 if self.grad else 1

    def get_n_out(self):
        return 1

    def get_sparsity_in(self, i):
        return ca.Sparsity.dense(self.nx, 1) if i == 0 else ca.Sparsity.dense(1, 1)

    def get_sparsity_out(self, i):
        return ca.Sparsity.dense(1, self.nx) if self.grad else ca.Sparsity.dense(1, 1)

    def eval(self, arg):
        interrupts.check()      # IPOPT ends on the exception (the optimizer re-raises it)
        x = np.asarray(arg[0], float).reshape(-1)
        if self.grad:
            return [ca.DM(self.obj.gradient(x)).T]
        return [self.obj.value(x)]

    def has_jacobian(self):
        return not self.grad

    def get_jacobian(self, name, inames, onames, opts):
        self._jac = _ObjCallback(name, self.obj, self.nx, grad=True)
        return self._jac


class _SampleRows:
    """Constraint rows h(q_k, qd_k, qdd_k) (R,) at every constraint sample k, evaluated as
    generated C (identify.model.regressor.BatchEvaluator) with their exact Jacobian chained to
    the NLP variables through the Fourier bases, instead of CasADi's MX virtual machine (the
    capsule distances and the torque bound mapped over the grid were ~75 % of a solve there).
    Output order: row-major by h's row, then sample (row r of sample k at r N + k)."""

    def __init__(self, h: ca.Function, n: int, m: int, free, q_start, P, V, A):
        from identify.model.regressor import BatchEvaluator
        q, qd, qdd = ca.SX.sym("q", n), ca.SX.sym("qd", n), ca.SX.sym("qdd", n)
        out = h(q, qd, qdd)
        self.R = int(out.shape[0])
        self.fh = BatchEvaluator(ca.Function("rows", [q, qd, qdd], [ca.densify(out)]))
        self.fj = BatchEvaluator(ca.Function("rows_jac", [q, qd, qdd],
                                             [ca.densify(ca.jacobian(out, ca.vertcat(q, qd, qdd)))]))
        self.n, self.m = n, m
        self.free = np.asarray(free, bool)
        self.q_start = np.asarray(q_start, float)
        self.P, self.V, self.A = P, V, A
        self.N = P.shape[0]
        self.size = self.R * self.N

    def _states(self, x, k=slice(None)):
        return states_on_grid(x, self.q_start, self.free, self.P[k], self.V[k], self.A[k])

    def subset(self, idx: np.ndarray) -> "_RowSubset":
        """The output rows `idx` (indices into value()) only, evaluated at their samples only."""
        return _RowSubset(self, idx)

    def value(self, x) -> np.ndarray:
        H = self.fh(*self._states(x))[:, :, 0]                   # (N, R)
        return H.T.reshape(-1)

    def jacobian(self, x) -> np.ndarray:
        n, m, N, R = self.n, self.m, self.N, self.R
        Jq = self.fj(*self._states(x))                           # (N, R, 3n)
        a, v, c = Jq[:, :, :n], Jq[:, :, n:2 * n], Jq[:, :, 2 * n:]
        JX = (np.einsum("krj,km->rkjm", a, self.P) + np.einsum("krj,km->rkjm", v, self.V)
              + np.einsum("krj,km->rkjm", c, self.A)).reshape(R * N, n * m)
        Jf = a[:, :, self.free].transpose(1, 0, 2).reshape(R * N, -1)
        return np.hstack([JX, Jf])


class _RowSubset:
    """Rows `idx` of a :class:`_SampleRows` (same order): h and its Jacobian evaluated at the
    samples those rows belong to only. A screened solver keeps a few hundred of the thousands
    of clearance rows; evaluating (and converting) the whole dense Jacobian every iteration
    was most of its evaluation time."""

    def __init__(self, base: _SampleRows, idx: np.ndarray):
        idx = np.asarray(idx, int)
        self.base, self.r, k = base, idx // base.N, idx % base.N
        self.K, self.kpos = np.unique(k, return_inverse=True)
        self.size = int(idx.size)
        self.Pk, self.Vk, self.Ak = base.P[k], base.V[k], base.A[k]

    def value(self, x) -> np.ndarray:
        H = self.base.fh(*self.base._states(x, self.K))[:, :, 0]      # (|K|, R)
        return H[self.kpos, self.r]

    def jacobian(self, x) -> np.ndarray:
        b = self.base
        n = b.n
        Jq = b.fj(*b._states(x, self.K))[self.kpos, self.r]          # (S, 3n)
        a, v, c = Jq[:, :n], Jq[:, n:2 * n], Jq[:, 2 * n:]
        JX = (a[:, :, None] * self.Pk[:, None, :] + v[:, :, None] * self.Vk[:, None, :]
              + c[:, :, None] * self.Ak[:, None, :]).reshape(self.size, -1)
        return np.hstack([JX, a[:, b.free]])


class _RowsCallback(ca.Callback):
    """CasADi Function x -> rows of a :class:`_SampleRows` (Jacobian via get_jacobian)."""

    def __init__(self, name, rows: _SampleRows, nx: int, jac: bool = False, opts=None):
        ca.Callback.__init__(self)
        self.rows, self.nx, self.jac = rows, nx, jac
        self.size = rows.size
        self._jac = None
        self.construct(name, opts or {})

    def get_n_in(self):
        return 2 if self.jac else 1

    def get_n_out(self):
        return 1

    def get_sparsity_in(self, i):
        return ca.Sparsity.dense(self.nx, 1) if i == 0 else ca.Sparsity.dense(self.size, 1)

    def get_sparsity_out(self, i):
        return (ca.Sparsity.dense(self.size, self.nx) if self.jac
                else ca.Sparsity.dense(self.size, 1))

    def eval(self, arg):
        interrupts.check()
        x = np.asarray(arg[0], float).reshape(-1)
        if self.jac:
            return [ca.DM(self.rows.jacobian(x))]
        return [ca.DM(self.rows.value(x))]

    def has_jacobian(self):
        return not self.jac

    def get_jacobian(self, name, inames, onames, opts):
        self._jac = _RowsCallback(name, self.rows, self.nx, jac=True)
        return self._jac


def build_nlp(model, problem: ExcitationProblem, bp, constraint_stride: int = 1,
              information0=None) -> NLP:
    """The IPOPT problem of `problem`. constraint_stride > 1: the linear limit rows only at every
    constraint_stride-th grid sample, tightened by cos(pi H stride / N) instead (Ehlich-Zeller on
    that coarser grid, so the limits still hold in continuous time; a cheaper first stage).
    information0 (p, p): information already held (D / A-optimal objectives)."""
    cs = int(constraint_stride)
    key = (id(model), problem_key(model, problem, bp, seed=None, n_starts=None,
                                  information0=information0), cs)
    if key in _NLP_CACHE:
        return _NLP_CACHE[key]
    t0 = time.perf_counter()
    H, N = problem.harmonics, problem.n_grid
    v = _variables(model, problem)
    f, keep = _objective(model, problem, bp, v, information0)
    if cs < 1 or N % cs or N // cs < 2 * H + 1:
        raise ValueError(f"constraint stride {cs} must divide n_grid = {N} and leave at least "
                         f"2H+1 = {2 * H + 1} constraint samples")
    bound = math.cos(math.pi * H * cs / N)  # Ehlich-Zeller: grid bound -> continuous-time bound
    rows = _Rows()
    lim = scaled_limits(model, problem)
    _limit_rows(rows, v, lim, cs, bound)
    callbacks = [cb for cb in (_table_rows(rows, model, problem, v, lim),
                               _clearance_rows(rows, model, problem, v),
                               _torque_rows(rows, model, problem, v, cs)) if cb is not None]
    _rms_rows(rows, model, problem, v)
    G = ca.vertcat(*rows.parts) if rows.parts else ca.MX(0, 1)
    lbg = np.concatenate(rows.lbg) if rows.lbg else np.zeros(0)
    ubg = np.concatenate(rows.ubg) if rows.ubg else np.zeros(0)
    lbx, ubx = _variable_bounds(v, lim)
    opts = _ipopt_options(problem)
    it_cb = IterationCallback("iterations", v.x.shape[0], G.shape[0])
    solver = ca.nlpsol("excitation", "ipopt", {"x": v.x, "f": f, "g": G},
                       dict(opts, iteration_callback=it_cb))
    callbacks.append(it_cb)
    linear, sample, kinds = _row_tables(rows.groups, lbg.size, cs, N)
    nlp = NLP(solver=solver, lbg=lbg, ubg=ubg, lbx=lbx, ubx=ubx, groups=rows.groups,
              g_fun=ca.Function("g", [v.x], [G]), f_fun=ca.Function("f", [v.x], [f]), bp=bp,
              build_time_s=time.perf_counter() - t0, keep=keep, symbols=(v.x, f, G), opts=opts,
              callbacks=callbacks, parts=rows.parts, sources=rows.sources,
              linear=linear, sample=sample, kinds=kinds)
    if len(_NLP_CACHE) > 8:
        _NLP_CACHE.clear()
    _NLP_CACHE[key] = nlp
    return nlp


@dataclass(frozen=True)
class _Variables:
    """The NLP variables x (MX, nx = n m + n_free) and the motion they give on the grid:
    Q, QD, QDD (n, N) MX [rad, rad/s, rad/s^2]; the bases P, V, A (N, m) of free_basis, the
    start pose q_start (n,) and its free joints `free` (n,) bool."""
    x: ca.MX
    Q: ca.MX
    QD: ca.MX
    QDD: ca.MX
    n: int
    m: int
    free: np.ndarray
    q_start: np.ndarray
    P: np.ndarray
    V: np.ndarray
    A: np.ndarray

    @property
    def nx(self) -> int:
        return int(self.x.shape[0])

    def sample_rows(self, h: ca.Function, name: str, k=slice(None)):
        """(rows h at the grid samples k as generated C, the CasADi callback evaluating them)."""
        rows = _SampleRows(h, self.n, self.m, self.free, self.q_start, self.P[k], self.V[k],
                           self.A[k])
        return rows, _RowsCallback(name, rows, self.nx)


def _variables(model, problem: ExcitationProblem) -> _Variables:
    """The decision variables of `problem` (module docstring of identify.excitation.optimizer)."""
    n, H, N, wf = model.n, problem.harmonics, problem.n_grid, problem.wf
    m = 2 * (H - 1)
    q_start, free = resolve_start(model, problem)
    nf = int(free.sum())
    t = np.arange(N) * (problem.period / N)
    P, V, A = free_basis(H, wf, t)
    x = ca.MX.sym("x", n * m + nf)
    X = ca.reshape(x[:n * m], m, n).T                       # (n, m), row i = joint i
    q0 = []
    kf = 0
    for i in range(n):
        if free[i]:
            q0.append(x[n * m + kf])
            kf += 1
        else:
            q0.append(ca.MX(float(q_start[i])))
    q0 = ca.vertcat(*q0)
    Q = ca.repmat(q0, 1, N) + ca.mtimes(X, ca.DM(P.T))       # (n, N)
    QD = ca.mtimes(X, ca.DM(V.T))
    QDD = ca.mtimes(X, ca.DM(A.T))
    return _Variables(x, Q, QD, QDD, n, m, free, q_start, P, V, A)


def _objective(model, problem: ExcitationProblem, bp, v: _Variables, information0):
    """(MX objective of x, the callback behind it or None). hessian="exact" needs second
    derivatives: the CasADi graph of J; else first derivatives only: compiled C + numpy."""
    if problem.hessian == "exact":
        fb = base_regressor_function(model, bp, problem.terms, problem.coulomb_eps)
        Wt = fb.map(problem.n_grid, "serial")(v.Q, v.QD, v.QDD)   # (p, n*N) = W^T
        p = Wt.shape[0]
        M = ca.mtimes(Wt, Wt.T)
        return _power_objective(M, p, int(problem.objective_power)), None
    keep = _ObjCallback("J", _FastObjective(model, problem, bp, v.free, v.q_start, v.P, v.V, v.A,
                                            information0), v.nx)
    return keep(v.x), keep


@dataclass
class _Rows:
    """The constraint rows as they are added, group by group: their MX `parts`, bounds,
    `groups` (label, joint index, slice into g, kind) and `sources` (None: an MX expression, or
    (_SampleRows, first output row, sign))."""
    parts: list = field(default_factory=list)
    lbg: list = field(default_factory=list)
    ubg: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    off: int = 0

    def add(self, expr, lo, hi, label, joint, kind, src=None) -> None:
        sz = expr.shape[0] * expr.shape[1]
        self.parts.append(ca.reshape(expr, sz, 1))
        self.sources.append(src)
        self.lbg.append(np.broadcast_to(lo, (sz,)))
        self.ubg.append(np.broadcast_to(hi, (sz,)))
        self.groups.append((label, joint, slice(self.off, self.off + sz), kind))
        self.off += sz


def _limit_rows(rows: _Rows, v: _Variables, lim: dict, cs: int, bound: float) -> None:
    """Position, velocity, acceleration limits scaled to +-bound at every cs-th grid sample."""
    for i in range(v.n):
        lo, hi = lim["q_min"][i], lim["q_max"][i]
        if np.isfinite(lo) and np.isfinite(hi):
            c, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
            rows.add(((v.Q[i, ::cs] - c) / h).T, -bound, bound, "position limit", i, "q")
        if np.isfinite(lim["qd_max"][i]):
            rows.add((v.QD[i, ::cs] / lim["qd_max"][i]).T, -bound, bound, "velocity limit", i,
                     "qd")
        if np.isfinite(lim["qdd_max"][i]):
            rows.add((v.QDD[i, ::cs] / lim["qdd_max"][i]).T, -bound, bound, "acceleration limit",
                     i, "qdd")


def _table_rows(rows: _Rows, model, problem: ExcitationProblem, v: _Variables, lim: dict):
    """Every moving link origin's height >= z_min [m] at every grid sample; the callback (None:
    no table, or no origin whose height changes -- those are settled by check_problem)."""
    if problem.z_min is None:
        return None
    n, N = v.n, problem.n_grid
    rng = np.random.default_rng(0)
    lo = np.maximum(lim["q_min"], -math.pi)
    hi = np.minimum(lim["q_max"], math.pi)
    z_var = np.ptp(model.link_origins(rng.uniform(lo, hi, (64, n)))[:, :, 2], axis=0)
    moving = [j for j in range(1, n + 1) if z_var[j] > 1e-9]
    if not moving:
        return None
    # heights at every grid sample as generated C with the exact Jacobian (the MX graph
    # of the origins mapped over the grid cost ~15 ms per Jacobian evaluation)
    qs, vs, us = ca.SX.sym("q", n), ca.SX.sym("qd", n), ca.SX.sym("qdd", n)
    Oz = model.link_origins_function()(qs)[2, :]
    h = ca.Function("heights", [qs, vs, us], [ca.vertcat(*[Oz[j] for j in moving])])
    src, cb = v.sample_rows(h, "heights")
    Zr = cb(v.x)                                             # (len(moving) N,) row-major
    for r, j in enumerate(moving):
        rows.add(Zr[r * N:(r + 1) * N], float(problem.z_min), np.inf,
                 "workspace z >= z_min (origin of frame)", j - 1, "z", (src, r * N, 1.0))
    return cb


def _clearance_rows(rows: _Rows, model, problem: ExcitationProblem, v: _Variables):
    """Capsule clearance >= collision_margin [m] of every checked pair at every grid sample
    (screened like the limit rows); the callback, None without collision constraint."""
    ac = collision_model(model, problem) if problem.collision_margin is not None else None
    if ac is None:
        return None
    N = problem.n_grid
    fd = ac.distance_function()
    qs, vs, us = ca.SX.sym("q", v.n), ca.SX.sym("qd", v.n), ca.SX.sym("qdd", v.n)
    h = ca.Function("clear", [qs, vs, us], [fd(qs)])
    # on the whole grid in both stages: the rows are screened (only those near their
    # margin reach IPOPT), and a coarse grid let clearances dip between its samples
    src, cb = v.sample_rows(h, "clearance")
    D = cb(v.x)                                                  # (R N,) row-major
    own = ac.row_owner()
    for k, lab in enumerate(ac.pair_labels()):
        r = np.flatnonzero(own == k)
        if r.size:
            rows.add(D[int(r[0]) * N:(int(r[-1]) + 1) * N], float(problem.collision_margin),
                     np.inf, f"clearance {lab}", -1, "col", (src, int(r[0]) * N, 1.0))
    return cb


def _torque_rows(rows: _Rows, model, problem: ExcitationProblem, v: _Variables, cs: int):
    """Motor-torque bound / tau_max <= 1 per joint at every cs-th grid sample (as -ratio >= -1:
    a dense-grid excess raises the lower bound); the callback, None without torque limit."""
    if problem.torque_limit is None:
        return None
    from .torque import torque_ratio_function
    Nc = problem.n_grid // cs
    src, cb = v.sample_rows(torque_ratio_function(model, problem.torque_limit), "torque",
                            slice(None, None, cs))
    Rt = cb(v.x)
    for i in range(v.n):
        rows.add(-Rt[i * Nc:(i + 1) * Nc], -1.0, np.inf, "motor-torque limit (-bound / tau_max)",
                 i, "tau", (src, i * Nc, -1.0))
    return cb


def _rms_rows(rows: _Rows, model, problem: ExcitationProblem, v: _Variables) -> None:
    """Mean square velocity over the grid / its minimum squared >= 1 per constrained joint."""
    vmin = rms_bounds(model, problem)
    if vmin is None:
        return
    for i in range(v.n):
        if vmin[i] > 0:
            rms2 = ca.sumsqr(v.QD[i, :]) / problem.n_grid
            rows.add(rms2 / vmin[i] ** 2, 1.0, np.inf, "minimum RMS velocity", i, "rms")


def _variable_bounds(v: _Variables, lim: dict) -> tuple[np.ndarray, np.ndarray]:
    """(lbx, ubx) (nx,): coefficients unbounded, free start angles within their range [rad]."""
    nm = v.n * v.m
    lbx = np.full(v.nx, -np.inf)
    ubx = np.full(v.nx, np.inf)
    for kf, i in enumerate(np.flatnonzero(v.free)):
        lbx[nm + kf] = max(lim["q_min"][i], -1e3)
        ubx[nm + kf] = min(lim["q_max"][i], 1e3)
    return lbx, ubx


def _ipopt_options(problem: ExcitationProblem) -> dict:
    """IPOPT's options of `problem`'s solve."""
    return {"ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes",
            "ipopt.hessian_approximation": problem.hessian, "ipopt.max_iter": int(problem.max_iter),
            "ipopt.tol": float(problem.tol), "ipopt.mu_strategy": problem.mu_strategy,
            "ipopt.limited_memory_max_history": int(problem.lbfgs_history),
            # L-BFGS creeps for many iterations once cond(W) has settled: stop after 10 iterations
            # with relative objective change below problem.obj_change_tol (at an acceptable point)
            "ipopt.acceptable_tol": 1e-2, "ipopt.acceptable_iter": 10,
            "ipopt.acceptable_obj_change_tol": float(problem.obj_change_tol)}


def _row_tables(groups: list, size: int, cs: int, N: int):
    """(linear, sample, kinds) (size,) per constraint row: a linear q/qd/qdd limit row, the grid
    sample index of the row within its group, its kind (q qd qdd z col tau rms)."""
    linear = np.zeros(size, bool)
    sample = np.zeros(size, int)
    kinds = np.zeros(size, "<U4")
    for label, j, sl, kind in groups:
        linear[sl] = kind in ("q", "qd", "qdd")
        kinds[sl] = kind
        step = cs if kind in ("q", "qd", "qdd", "tau") else 1
        if kind == "col":               # rows of the pair, each over the N samples
            sample[sl] = np.arange(sl.stop - sl.start) % N
        else:
            sample[sl] = np.arange(sl.stop - sl.start) * step
    return linear, sample, kinds
