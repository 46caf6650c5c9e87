"""Where the tuning commands' independent pricing jobs run: here, one after another, or as Ray tasks.

A job is a function and its arguments; both mappers return the results in the jobs' order, so
``as2d select --ray`` and ``as2d replay --ray`` write exactly what the local commands write.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence


def local_map(fn: Callable, jobs: Sequence[tuple]) -> list:
    return [fn(*args) for args in jobs]


def ray_map(fn: Callable, jobs: Sequence[tuple]) -> list:
    """``fn(*args)`` for every job as a Ray task (Ray must be initialised: ``as2d_bench.distributed.connect``).

    A large argument shared by many jobs (a source's traces, the costs) is put in the object store
    once rather than shipped with every task.
    """
    import ray

    task = ray.remote(num_cpus=1)(fn)
    shared: dict[int, object] = {}

    def ref(value):
        if isinstance(value, (int, float, str, type(None))):
            return value
        if id(value) not in shared:
            shared[id(value)] = ray.put(value)
        return shared[id(value)]

    return ray.get([task.remote(*(ref(a) for a in args)) for args in jobs])


def replay_plan(record, costs, budgets: Sequence[int | None], align_window: int, publication: str,
                niceness: int | None = None, start: str | None = None) -> list:
    """One trace replayed at each budget (None: as traced), drafter niceness and start: ``as2d replay``'s job per trace.

    A budget the profile cannot price gives the reason (a string) in its place, not an error.
    """
    from .costs import MissingCost
    from .replay import replay_record

    out = []
    for budget in budgets:
        try:
            out.append(replay_record(record, costs, budget, align_window, publication, niceness, start))
        except MissingCost as exc:
            out.append(str(exc))
    return out
