"""IPOPT's iterations, for the optimizer's progress bars: the per-iteration callback every
excitation solve carries, the *sink* it reports to (set around the starts the optimizer runs in
this process: a tqdm bar; in a worker process: a shared-memory counter the parent's bar reads),
and the words of an iteration count."""
from __future__ import annotations

import contextlib

import casadi as ca

from identify.common import interrupts

#: where the running solve's iterations go: an object with ``iteration()`` (called once per
#: IPOPT iteration), or None. Set by identify.excitation.optimizer (iteration_sink) around the
#: starts it runs in this process; a forked start worker runs with None (its parent shows the
#: starts' bar, not the workers' iterations)
_SINK = {"sink": None}


@contextlib.contextmanager
def iteration_sink(sink):
    """Send every IPOPT iteration of the solves within to ``sink.iteration()``."""
    old = _SINK["sink"]
    _SINK["sink"] = sink
    try:
        yield sink
    finally:
        _SINK["sink"] = old


class IterationCallback(ca.Callback):
    """IPOPT's per-iteration callback (nlpsol option ``iteration_callback``): one call per
    iteration to the current :func:`iteration_sink`. A pending interrupt stops the solve at the
    iteration (a nonzero return: IPOPT's User_Requested_Stop; the optimizer's
    interrupts.check() after the solve raises it)."""

    def __init__(self, name: str, nx: int, ng: int, opts=None):
        ca.Callback.__init__(self)
        self.nx, self.ng = int(nx), int(ng)
        self.construct(name, opts or {})

    def get_n_in(self):
        return ca.nlpsol_n_out()

    def get_n_out(self):
        return 1

    def get_name_in(self, i):
        return ca.nlpsol_out(i)

    def get_name_out(self, i):
        return "ret"

    def get_sparsity_in(self, i):
        name = ca.nlpsol_out(i)
        if name == "f":
            return ca.Sparsity.scalar()
        if name in ("x", "lam_x"):
            return ca.Sparsity.dense(self.nx)
        if name in ("g", "lam_g"):
            return ca.Sparsity.dense(self.ng)
        return ca.Sparsity(0, 0)

    def eval(self, arg):
        sink = _SINK["sink"]
        if sink is not None:
            sink.iteration()
        return [1 if interrupts.pending() is not None else 0]




def current_sink():
    """The sink of the running solves (None: nobody listens)."""
    return _SINK["sink"]


def solve_started(max_iter: int) -> None:
    """Tell the iteration sink (:func:`iteration_sink`) that an IPOPT solve of at most
    `max_iter` iterations begins."""
    sink = current_sink()
    if sink is not None:
        sink.solve_started(max_iter)


def solve_finished(iterations: int) -> None:
    """Tell the iteration sink that the IPOPT solve ended after `iterations` (its stats:
    IPOPT's callback is also called in its restoration phase, so the live count is close, this
    one exact)."""
    sink = current_sink()
    if sink is not None:
        sink.solve_finished(iterations)


def stage(desc: str, s: int) -> None:
    """Tell the iteration sink which stage (`desc`, of start `s`) the next solves belong to."""
    sink = current_sink()
    if sink is not None:
        sink.stage(desc, s)


def iterations_text(iterations: int, solves: int) -> str:
    """"120 it" (one IPOPT solve) or "200 it in 3 IPOPT solves"."""
    return f"{iterations} it" + (f" in {solves} IPOPT solves" if solves > 1 else "")


class IterationBar:
    """The iteration sink (:func:`iteration_sink`) of starts run in this
    process: a tqdm bar over the running IPOPT solve's iterations, reset at every solve with
    that solve's max_iter as total (its ETA: the time to max_iter at the current pace, an upper
    bound) and described by the stage (:meth:`stage`); set to IPOPT's own count when the solve
    ends."""

    def __init__(self, bar):
        self.bar, self.desc, self.first = bar, "", True

    def stage(self, desc: str, s: int) -> None:
        """Name the stage the next solves belong to ("validation (start 1/1, polish)"; of
        start `s`)."""
        self.desc = desc

    def solve_started(self, max_iter: int) -> None:
        """An IPOPT solve with `max_iter` iterations at most begins."""
        self.bar.reset(total=int(max_iter))
        self.bar.set_description(self.desc, refresh=False)
        self.first = True

    def iteration(self) -> None:
        """IPOPT finished an iteration (its first call is iteration 0, the starting point)."""
        if self.first:
            self.first = False
        elif self.bar.n < self.bar.total:
            self.bar.update(1)

    def solve_finished(self, iterations: int) -> None:
        """The solve ended after `iterations` (IPOPT's count)."""
        self.bar.n = min(int(iterations), int(self.bar.total or iterations))
        self.bar.refresh()


class IterationCount:
    """The iteration sink of starts run in worker processes: adds each IPOPT iteration of start
    s to ``counts[s]`` (a shared-memory array the parent reads for its bar)."""

    def __init__(self, counts):
        self.counts, self.slot, self.first, self.base = counts, 0, True, 0

    def stage(self, desc: str, s: int) -> None:
        self.slot = int(s)

    def solve_started(self, max_iter: int) -> None:
        self.first, self.base = True, int(self.counts[self.slot])

    def solve_finished(self, iterations: int) -> None:
        self.counts[self.slot] = self.base + int(iterations)     # IPOPT's own count

    def iteration(self) -> None:
        if self.first:          # iteration 0: the starting point
            self.first = False
            return
        self.counts[self.slot] += 1


#: IPOPT return statuses in words (identify.excitation.optimizer messages)
_IPOPT_WORDS = {
    "Solve_Succeeded": "solved",
    "Solved_To_Acceptable_Level": "solved to the acceptable tolerance",
    "Infeasible_Problem_Detected": "IPOPT found the constraints infeasible",
    "Restoration_Failed": "IPOPT could not restore feasibility",
    "Maximum_CpuTime_Exceeded": "stopped at the time limit",
    "Invalid_Number_Detected": "IPOPT met NaN/inf in the problem functions",
}


def ipopt_status_text(status: str, feasible: bool, max_iter: int | None = None) -> str:
    """An IPOPT return status in words. ``Maximum_Iterations_Exceeded`` is not a failure when the
    iterate is feasible: the optimizer stopped at max_iter with a usable trajectory (only its
    conditioning might have improved further). max_iter: the limit of that one IPOPT solve (a
    start may run several solves: screening rounds, re-solves; start_line counts them)."""
    if status == "Maximum_Iterations_Exceeded":
        it = f" ({max_iter} it per IPOPT solve)" if max_iter else ""
        return (f"optimizer stopped at max_iter{it} with a feasible trajectory" if feasible else
                f"optimizer stopped at max_iter{it} without a feasible trajectory")
    return _IPOPT_WORDS.get(status, f"IPOPT status {status}")


def start_line(label: str, s: int, n_starts: int, entry: dict, feasible: bool,
               objective: str = "cond") -> str:
    """The progress line of finished start `s` (0-based) of `label`'s optimization, from its
    ExcitationResult.starts entry: the last solve's status against that solve's max_iter,
    the iterations of every solve and how many solves they took (stage 1, then the polish),
    the wall time [s] and the start's figure."""
    st = ipopt_status_text(entry["status"], feasible, entry.get("max_iter"))
    it = iterations_text(int(entry["iterations"]), int(entry.get("solves", 1)))
    if "polish_iterations" in entry:
        it += " + polish " + iterations_text(int(entry["polish_iterations"]),
                                              int(entry.get("polish_solves", 1)))
        if entry.get("polish_status") == "Maximum_Iterations_Exceeded":
            it += f" (polish stopped at its max_iter {entry.get('polish_max_iter')})"
    name = "cond" if objective == "cond" else objective
    return (f"{label} start {s + 1}/{n_starts}: {st}, {it}, {entry['time_s']:.1f} s, "
            f"{name} {entry['cond']:.4g}")
