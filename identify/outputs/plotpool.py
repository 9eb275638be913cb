"""Plots drawn in worker processes, beside the run's own work.

A run's plots cost more wall time than its fit (matplotlib's import, then Agg drawing each figure
in one thread). :func:`plot_pool` forks one *plot server* when the run starts: it imports
matplotlib while this process reads and fits (on another core). When the plots' data exist,
:func:`draw` sends it the jobs; the server forks one drawer per core the process may use (at most
:data:`MAX_WORKERS`), already warm, and the figures are drawn in parallel.

    with plot_pool(enabled=scn.outputs.plots) as pool:      # None where no pool can run
        pool.send(early_jobs, workers=1)    # e.g. the trajectories', beside the arm's run
        ...                                                 # the run's work
        failures = draw(pool, jobs)     # [(stem, error text)]; in this process without a pool

A job is ``(stem, function, args, kwargs, path)``: ``function(*args, path, **kwargs)`` writes one
PNG (or another output: what it returns is kept in :attr:`PlotPool.results`); a module-level
function, since jobs travel pickled. Where no server can start (not Linux, a
daemonic process such as a sweep's worker, other threads alive:
:func:`identify.excitation.workers.start_workers`), the server died, or a job's data cannot be
pickled, that job is drawn in this process: the same files, only slower. The server and its
drawers die with their parent (PR_SET_PDEATHSIG); an interrupt ends them at once.
"""
from __future__ import annotations

import contextlib
import os
import pickle

from identify.common import interrupts

#: drawers at most (each holds a matplotlib: ~60 MB)
MAX_WORKERS = 2


def _run_job(job) -> tuple[str, object]:
    """Run one job: ('', what the function returned) or (error text, None)."""
    stem, fn, args, kwargs, path = job
    try:
        return "", fn(*args, path, **kwargs)
    except Exception as exc:  # noqa: BLE001 -- reported by the caller, never raised there
        return (str(exc) or type(exc).__name__), None


def _draw_one(blob: bytes) -> tuple[str, object]:
    """:func:`_run_job` of one pickled job, in a drawer (a result that cannot travel back is
    dropped: the files are written)."""
    err, out = _run_job(pickle.loads(blob))
    try:
        pickle.dumps(out)
    except Exception:  # noqa: BLE001
        out = None
    return err, out


def _warm_up() -> None:
    """Import the drawing stack and draw one small figure with text into memory: the fonts and
    Agg's caches load here, once, not in every drawer's first plot."""
    import io
    from identify.common import figures
    plt = figures.pyplot()
    import PIL.Image  # noqa: F401  (figures.save's PNG writer)
    fig = plt.figure(figsize=(2, 1))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], label="x")
    ax.set_title("warm-up · N·m")
    ax.legend()
    fig.savefig(io.BytesIO(), format="png", dpi=figures.DPI)
    plt.close(fig)


def _serve(conn, parent: int) -> None:
    """The plot server: warm up, then draw each batch ``(blobs, workers)`` of pickled jobs it
    receives -- in forked drawers when `workers` > 1 -- and send back their error texts, one
    reply per batch in order (None ends it)."""
    interrupts.die_with_parent(parent)
    _warm_up()
    import concurrent.futures as cf
    import multiprocessing as mp
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        blobs, workers = msg
        w = max(1, min(workers, len(blobs)))
        if w == 1:
            conn.send([_draw_one(b) for b in blobs])
            continue
        with cf.ProcessPoolExecutor(max_workers=w, mp_context=mp.get_context("fork"),
                                    initializer=interrupts.die_with_parent,
                                    initargs=(os.getpid(),)) as ex:
            conn.send(list(ex.map(_draw_one, blobs)))


class PlotPool:
    """The run's plot server (a forked process) and the pipe to it: :meth:`send` hands it a
    batch of jobs and returns at once, :meth:`finish` waits for every batch sent."""

    def __init__(self, proc, conn, workers: int):
        self._proc, self._conn = proc, conn
        self.workers = workers
        self._pending: list[list] = []      # the jobs of each batch sent, not yet answered
        self._local: list = []              # jobs this process draws (not picklable, no server)
        self.sent: set[str] = set()         # stems of every job handed over so far
        self.results: dict[str, object] = {}    # stem -> what its function returned

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def send(self, jobs: list, workers: int | None = None) -> None:
        """Hand `jobs` to the server (drawn by `workers` drawers, default all), or keep them
        for :meth:`finish` to draw here (a job that cannot be pickled, a server gone)."""
        blobs, batch = [], []
        for job in jobs:
            self.sent.add(job[0])
            try:
                blobs.append(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
                batch.append(job)
            except (pickle.PicklingError, TypeError, AttributeError):
                self._local.append(job)
        if not batch:
            return
        try:
            if not self.alive:
                raise BrokenPipeError
            self._conn.send((blobs, int(workers or self.workers)))
            self._pending.append(batch)
        except (OSError, ValueError):
            self._local += batch

    def finish(self) -> list[tuple[str, str]]:
        """Wait for every batch sent (an interrupt is seen within 0.1 s) and draw the jobs kept
        here; returns (stem, error text) of the jobs that failed."""
        failures: list[tuple[str, str]] = []
        while self._pending:
            batch = self._pending[0]
            errors = self._receive()
            if errors is None:            # the server is gone: its batches are drawn here
                for b in self._pending:
                    self._local += b
                self._pending = []
                break
            self._pending.pop(0)
            for job, (err, out) in zip(batch, errors):
                if err:
                    failures.append((job[0], err))
                else:
                    self.results[job[0]] = out
        local, self._local = self._local, []
        return failures + _draw_here(local, self.results)

    def _receive(self) -> list[str] | None:
        try:
            while not self._conn.poll(0.1):
                interrupts.check()
                if not self.alive:
                    return None
            return self._conn.recv()
        except (EOFError, OSError):
            interrupts.check()
            return None

    def close(self, kill: bool = False) -> None:
        """End the server (`kill`: at once); a second call is a no-op."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if not kill and proc.is_alive():
                self._conn.send(None)
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
            proc.join(1.0)
        with contextlib.suppress(OSError):
            self._conn.close()


def _draw_here(jobs: list, results: dict | None = None) -> list[tuple[str, str]]:
    """Run `jobs` in this process; (stem, error text) of those that failed, the others'
    return values into `results`."""
    failures = []
    for job in jobs:
        err, out = _run_job(job)
        if err:
            failures.append((job[0], err))
        elif results is not None:
            results[job[0]] = out
    return failures


def start(workers: int | None = None) -> PlotPool | None:
    """Fork the plot server with `workers` drawers (None: the usable cores, at most
    MAX_WORKERS); None where forking is not safe here (see the module docstring)."""
    import multiprocessing as mp
    from identify.excitation.workers import start_workers
    if start_workers(2, 2) < 2:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    w = int(workers) if workers is not None else max(1, min(MAX_WORKERS, cores))
    if w < 1:
        return None
    ctx = mp.get_context("fork")
    try:
        here, there = ctx.Pipe()
        # not daemonic: a daemonic process may not fork its drawers
        proc = ctx.Process(target=_serve, args=(there, os.getpid()), name="twinid-plots")
        proc.start()
    except OSError:
        return None
    there.close()
    return PlotPool(proc, here, w)


@contextlib.contextmanager
def plot_pool(enabled: bool = True, workers: int | None = None):
    """A :class:`PlotPool` for the block (None when disabled or impossible), ended when the
    block ends -- at once when it ends by an exception (an interrupt)."""
    pool = start(workers) if enabled else None
    try:
        yield pool
    except BaseException:
        if pool is not None:
            pool.close(kill=True)
        raise
    finally:
        if pool is not None:
            pool.close()


def draw(pool: PlotPool | None, jobs: list) -> list[tuple[str, str]]:
    """Draw every job (with `pool`: the ones not sent yet, and wait for everything it was
    sent); returns (stem, error text) of the jobs that failed -- a plot never loses a finished
    run."""
    if pool is None:
        return _draw_here(jobs)
    pool.send([j for j in jobs if j[0] not in pool.sent])
    return pool.finish()
