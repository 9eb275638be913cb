"""The independent starts of an excitation optimization run in forked worker processes
(:func:`map_starts`), one per core: same results as in one process, since every start is
seeded by its index. A worker dies with its parent; a pool that cannot start or loses a worker
falls back to running the starts in this process."""
from __future__ import annotations
from identify.common import interrupts


#: the start job of the running map_starts (inherited by its forked workers)
_START_JOB = None


def _run_start_job(s: int):
    return _START_JOB(s)


def _start_worker_init(parent: int) -> None:
    """Forked start worker: dies with the parent (identify.common.interrupts.die_with_parent);
    a parent killed by a signal would otherwise leave its pool workers waiting forever."""
    interrupts.die_with_parent(parent)


def start_workers(n_starts: int, workers: int | None = None) -> int:
    """How many processes map_starts uses: `workers` (None: the cores this process may use),
    at most one per start, and 1 where forking is not safe or possible: not Linux, a daemonic
    process (a pool worker), or other threads alive (a forked child could inherit a held lock;
    the interrupt watchdog holds none)."""
    import multiprocessing as mp
    import os
    import sys
    import threading
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    w = max(1, min(int(workers), int(n_starts)))
    if (w < 2 or not sys.platform.startswith("linux") or mp.current_process().daemon
            or sum(not interrupts.is_watchdog(t) for t in threading.enumerate()) > 1):
        return 1
    return w


def map_starts(job, n_starts: int, workers: int | None, on_done=None, on_wait=None,
               poll_s: float = 0.5) -> list:
    """[job(s) for s in range(n_starts)], the independent starts run in forked worker processes
    when start_workers() allows (the children inherit the built problem, its compiled functions
    and the one-thread BLAS; every start is seeded by its index, so the results are the same
    as in one process). on_done(s, result), if given, is called in this process as each start
    finishes (in the order they finish: a progress bar over the starts); on_wait(), if given,
    every `poll_s` [s] while worker processes run (a bar showing their progress)."""
    global _START_JOB
    done: dict = {}

    def finished(s, result):
        done[s] = result
        if on_done is not None:
            on_done(s, result)

    def rest_here():
        for s in range(n_starts):
            if s not in done:
                finished(s, job(s))
        return [done[s] for s in range(n_starts)]
    w = start_workers(n_starts, workers)
    if w == 1:
        return rest_here()
    import concurrent.futures as cf
    import multiprocessing as mp
    import os
    from identify.common.progress import warn
    _START_JOB = job
    try:
        try:        # a pool needs POSIX semaphores (/dev/shm), missing in some containers
            ex = cf.ProcessPoolExecutor(max_workers=w, mp_context=mp.get_context("fork"),
                                        initializer=_start_worker_init, initargs=(os.getpid(),))
        except OSError as exc:
            warn(f"excitation starts run in one process: no worker pool ({exc})")
            return rest_here()
        try:
            with ex:
                try:
                    futs = {ex.submit(_run_start_job, s): s for s in range(n_starts)}
                    running = set(futs)
                    while running:
                        ready, running = cf.wait(running, timeout=poll_s,
                                                 return_when=cf.FIRST_COMPLETED)
                        for fut in ready:
                            finished(futs[fut], fut.result())
                        if on_wait is not None:
                            on_wait()
                    return [done[s] for s in range(n_starts)]
                except BaseException:
                    interrupts.stop_pool(ex)    # interrupted: the starts are not waited for
                    raise
        except cf.process.BrokenProcessPool:
            interrupts.check()      # a Ctrl-C (to the whole group) ended the workers
            # a worker died (e.g. killed by the OOM killer): the starts are seeded by index,
            # so running the unfinished ones here gives the result the pool would have
            warn("an excitation start's worker process died; its starts re-run in this process")
            return rest_here()
    finally:
        _START_JOB = None
