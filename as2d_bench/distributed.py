"""``as2d bench --ray``: windows as tasks on Ray actors that keep their models resident.

Each actor builds the bench once on its own machine (from a :class:`BenchSpec`: names, not
models), pins itself to its own cores, and runs whole windows: every method of a window back to
back on one worker, so each ratio stays within one machine. The driver feeds one window at a time
to each idle actor, appends each window's rows to ``results.jsonl`` as they come back (the same
resumable folder as a local run), and when an actor dies, its window goes back in the queue and a
new actor, placed wherever Ray finds room, takes the dead one's place.
"""
from __future__ import annotations

import fcntl
import os
import time
from collections import deque
from contextlib import contextmanager
from collections.abc import Callable
from pathlib import Path

from as2d_core.input.audio import load_audio
from .rows import error_row
from .runner import ManifestRow, _NoBar, _progress, timelines_of, write_outputs
from .spec import BenchSpec

SLOT_LOCKS = Path(os.environ.get("AS2D_SLOT_DIR", "/tmp"))
MAX_ATTEMPTS = 3


class WorkerFailed(RuntimeError):
    """A worker could not build the bench (a missing model or plugin on its machine)."""


def claim_cores(count: int) -> tuple[list[int] | None, object]:
    """Pin this process to ``count`` cores no other bench worker on this machine holds.

    Workers on one machine take numbered slots through lock files; the lock dies with its process,
    so a dead worker's cores are free for its replacement. Every existing thread is pinned, and threads
    started later (the runtimes' pools, built after this) inherit it. Without enough free cores the
    worker is left unpinned: ``None``.
    """
    usable = sorted(os.sched_getaffinity(0))
    for slot in range(len(usable) // count):
        lock = open(SLOT_LOCKS / f"as2d-bench-cores-{slot}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        cores = usable[slot * count:(slot + 1) * count]
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cores)
            except OSError:  # a thread that ended meanwhile
                pass
        return cores, lock
    return None, None


class BenchWorker:
    """A Ray actor's body: the models of one bench, resident for every window it is given."""

    def __init__(self, spec: BenchSpec, cores: int):
        self.cores, self._lock = claim_cores(cores)
        self.bench = spec.build(Path("."), progress=False)

    def run_window(self, window: ManifestRow, audio) -> tuple[list[dict], list[dict]]:
        import ray

        rows, traces = self.bench.window_rows(window, audio)
        worker = {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "cores": self.cores}
        for row in rows:
            row["worker"] = worker
        return rows, traces


class RayBench:
    """The driver: hands windows to actors, writes what comes back, replaces actors that die."""

    def __init__(self, spec: BenchSpec, out_dir: Path, workers: int | None = None,
                 cpus_per_worker: float | None = None, progress: bool = True,
                 on_submit: Callable[[RayBench, object, ManifestRow], None] | None = None):
        self.spec = spec
        self.out_dir = Path(out_dir)
        self.workers = workers
        self.cpus_per_worker = cpus_per_worker or spec.cores
        self.cores_each = max(1, round(self.cpus_per_worker))  # the cores a worker pins itself to
        self.progress = progress
        self.on_submit = on_submit  # for tests: called after each window is handed to an actor
        self.in_flight: dict = {}  # object ref -> (actor, window)
        self.retried: list[str] = []  # a window once per worker that died under it
        self.folder = None

    @property
    def _worker_class(self):
        import ray

        return ray.remote(num_cpus=self.cpus_per_worker, max_restarts=0)(BenchWorker)

    def run(self, windows: list[ManifestRow], fresh: bool = False, pool_machines: bool = False) -> dict:
        """Every window not yet in the folder, on the workers; then the outputs from all rows."""
        import ray

        self.folder = self.spec.folder(self.out_dir)
        done = {r["window"] for r in self.folder.open(fresh)}
        todo = deque(w for w in windows if w.id not in done)
        timelines = self.folder.timelines()
        count = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1) // self.cpus_per_worker))
        idle = [self._new_worker() for _ in range(min(count, len(todo)))]
        bar = _progress(len(todo), self.progress) if todo else _NoBar()
        started, finished = time.perf_counter(), 0
        try:
            while todo or self.in_flight:
                while idle and todo:
                    actor, window = idle.pop(), todo.popleft()
                    self.in_flight[actor.run_window.remote(window, load_audio(window.path))] = (actor, window)
                    if self.on_submit is not None:
                        self.on_submit(self, actor, window)
                ready, _ = ray.wait(list(self.in_flight), num_returns=1)
                actor, window = self.in_flight.pop(ready[0])
                result = self._collect(ready[0], window, todo)
                if result is None:  # the worker died: a new one takes its place
                    idle.append(self._new_worker())
                    continue
                rows, traces = result
                self.folder.append(rows, traces)
                timelines.update(timelines_of(traces))
                idle.append(actor)
                finished += 1
                bar.update(1)
        finally:
            bar.close()
            for actor in [a for a, _ in self.in_flight.values()] + idle:
                ray.kill(actor)
        extra = {"run": {"executor": "ray", "workers": count, "cpus_per_worker": self.cpus_per_worker,
                         "retried_windows": self.retried, "windows_run": finished,
                         "wall_s": time.perf_counter() - started}}
        return write_outputs(self.folder, self.spec.options, self.spec.source_names, windows, timelines,
                             pool_machines, extra)

    def _new_worker(self):
        """An actor placed wherever Ray has room (for a replacement: possibly another machine)."""
        return self._worker_class.remote(self.spec, self.cores_each)

    def _collect(self, ref, window: ManifestRow, todo: deque) -> tuple[list[dict], list[dict]] | None:
        """A window's rows and traces; None when its worker died (the window queued again, or given up)."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

        try:
            return ray.get(ref)
        except (RayActorError, ActorUnavailableError) as exc:
            if getattr(exc, "actor_init_failed", False):
                raise WorkerFailed(f"a Ray worker could not build the bench: {_error_line(exc)}") from exc
            self.retried.append(window.id)
            if self.retried.count(window.id) < MAX_ATTEMPTS:
                todo.appendleft(window)
            else:
                self.folder.append(self._failed_rows(window, f"its Ray worker died {MAX_ATTEMPTS} times"), [])
            return None
        except RayTaskError as exc:  # not a method's failure (those are rows): the window's task itself
            return self._failed_rows(window, _error_line(exc)), []

    def _failed_rows(self, window: ManifestRow, message: str) -> list[dict]:
        return [error_row(window, label, message) for label in self.folder.labels]


def _error_line(exc: BaseException) -> str:
    """The last line of a Ray error (its cause, after the remote traceback)."""
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


class RayUnavailable(RuntimeError):
    """Ray is not installed here, or the cluster cannot be joined."""


@contextmanager
def ray_cluster(address: str | None):
    """Ray, joined for the duration: the cluster at ``address``, else the one this machine belongs to, else a
    new local one; shut down on exit only if this call started it (a test's own instance stays)."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(f"--ray needs Ray ({exc}); pip install 'as2d[ray]'") from exc
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # an unreachable address, a version mismatch with the cluster
            raise RayUnavailable(f"could not join the Ray cluster at {address or '(auto)'}: {exc} (a cluster "
                                 "started with `ray start` needs RAY_AUTH_MODE=token and its token here; see "
                                 "README)") from exc
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
