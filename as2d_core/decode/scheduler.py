"""One owner for the target's verification calls of everything a process decodes: continuous batching.

Each request (a server's, a stream's block, a file's window) still runs the one target loop of every
method in a thread of its own. Its session is a row of the target's ``WindowGroup``, and its ``verify``
is handed to the scheduler, which gathers the rows that are ready into one ``WindowGroup.verify_rows``
call and hands each row its answer. Unlike a wave (``decode.together``), rows join when they are
prepared and leave when they close, at any step: nobody waits for a row that is not there yet.

A call is made once every row in the group has asked, or once the first row to ask has waited as long
as the last call took (counted from that call's end): a row busy elsewhere (a serial drafter, a slow thread) costs the others at most
one call's time, and is taken at the next step. Every row gets the tokens its own session would give
(the group's contract), so every method stays exact whatever shares a call.

Beam searches are gathered the same way (``ContinuousCalls``, the one policy for both): a request prepared alone
keeps its session, and its beam rows are a block of the scheduler's ``BeamWave`` of their width, every request's
rows stepping in one call, as a file's windows do in ``decode.together`` but joining and leaving at any step. A row
scores as it would in a wave of one; the wave's graph may round the last bits otherwise than the beams graph a
request alone searches on (``capabilities.BeamWaves``), and beams run target-only, so every method's beams are
target-only's on the same server.

Speculation by what it is worth: a decode admitted while fewer than ``speculate_rows`` others are
decoding uses its drafter (the threshold from the device profile's batch costs, ``speculate_rows_from``); one admitted beside more runs target-only, and its drafter never starts
(``admit``). Drafting pays while the target's calls are small; once many rows share a call, the call
already carries them and the drafters' threads would only take the cores from it.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import attrs

from as2d_core.capabilities import BeamRows, BeamWave, BeamWaves, WindowBatching, WindowGroup
from as2d_core.contracts import Request, Target, TargetSession
from as2d_core.decode.together import BeamWaveSession, GatheredSession
from as2d_core.decode.wrappers import TargetWrapper

# Decodes that draft beside others, where no device profile prices it (``speculate_rows_from``): drafting
# only while a decode is alone. Measured on 2 cores (BENCHMARKS.md section 14): windows side by side with their drafters
# (6.57 s) were no faster than the same windows target-only (6.51 s), while alone drafting pays.
SPECULATE_ROWS = 1

# A file's windows where no device profile prices them (``wave_prices``): waves of this many (fewer for a shorter
# file), drafting. Measured on this repository's machine (2 cores; BENCHMARKS.md section 15, the 330 s recording,
# whisper-base with whisper-tiny.en drafting): target-only one window at a time 14.33 s, target-only in waves of 4
# 10.83 s, as2d one at a time 10.50 s, as2d in waves of 4 9.68 s; int8: 10.17, 7.81, 7.72 and 7.49 s.
DEFAULT_WAVE_SIZE = 4


@attrs.define
class Admission:
    """One decode's place with the scheduler: whether it drafts, and the batch it was admitted beside."""

    drafts: bool
    beside: int  # decodes already running when it was admitted


class ContinuousCalls:
    """Asks of members that join and leave at any step, gathered into calls of ``call`` (``call(asks)``: each
    ask's answer, in order): a call is made once every member has asked, or once the first to ask has waited as
    long as the last call took, counted from that call's end (see the module's docstring). At most ``seats``
    members at once; ``heard(asks)`` runs after each call."""

    def __init__(self, call: Callable[[list[tuple]], list], seats: int, heard: Callable[[int], None]):
        self._make_call, self._heard = call, heard
        self._ready = threading.Condition()
        self._members: set[int] = set()  # by their key
        self._asked: dict[int, tuple] = {}
        self._answers: dict[int, object] = {}
        self._first_ask: float | None = None  # when the oldest unanswered ask came
        self._calling = False
        self._last_call_s = self._last_call_end = 0.0
        self._seats = threading.BoundedSemaphore(seats)

    def enter(self, make: Callable[[], object], key: int | None = None):
        """What ``make`` makes (waiting for a free seat first), a member from now on under ``key`` (by default
        the id of what it made)."""
        self._seats.acquire()
        try:
            made = make()
        except BaseException:
            self._seats.release()
            raise
        with self._ready:
            self._members.add(id(made) if key is None else key)
        return made

    def leave(self, key: int) -> None:
        """``key`` asks no more: nobody waits for it, and its seat is free (once, however often it leaves)."""
        with self._ready:
            if key not in self._members:
                return
            self._members.discard(key)
            self._ready.notify_all()
        self._seats.release()

    def ask(self, key: int, asked: tuple):
        """The answer to ``asked`` from the next call that takes it."""
        with self._ready:
            self._asked[key] = asked
            if self._first_ask is None:
                self._first_ask = time.perf_counter()
            self._ready.notify_all()
            while key not in self._answers:
                wait = self._wait_s()
                if wait == 0.0:
                    self._call()
                else:
                    self._ready.wait(wait)
            answer = self._answers.pop(key)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _wait_s(self) -> float | None:
        """Under the lock: 0 when a call should start now, else how long to wait (None: until told)."""
        if self._calling or not self._asked:
            return None
        if self._members.issubset(self._asked):
            return 0.0
        # counted from the last call's end: members answered by it are on their way back, not late
        left = max(self._first_ask, self._last_call_end) + self._last_call_s - time.perf_counter()
        return 0.0 if left <= 0 else left

    def _call(self) -> None:
        """Under the lock, released during the call: one call for every member that has asked."""
        keys, asks = list(self._asked), list(self._asked.values())
        self._asked.clear()
        self._first_ask, self._calling = None, True
        self._ready.release()
        start = time.perf_counter()
        try:
            answers: list = self._make_call(asks)
        except BaseException as exc:  # every member of the call hears it, none hangs
            answers = [exc] * len(asks)
        finally:
            self._ready.acquire()
        self._last_call_end = time.perf_counter()
        self._last_call_s = self._last_call_end - start
        self._calling = False
        self._answers.update(zip(keys, answers))
        self._ready.notify_all()
        self._heard(len(asks))


class Scheduler:
    """The rows of one ``WindowGroup``, verified together step by step, and the beam searches of every request,
    stepped together in one ``BeamWave`` per width (see the module's docstring)."""

    def __init__(self, group: WindowGroup, speculate_rows: int = SPECULATE_ROWS,
                 beam_wave: Callable[[int], BeamWave | None] | None = None):
        if speculate_rows < 0:
            raise ValueError(f"speculate_rows must be 0 or more, got {speculate_rows}")
        self.group, self.speculate_rows = group, speculate_rows
        self._rows = ContinuousCalls(group.verify_rows, group.size, self._heard)
        self._beam_wave = beam_wave  # width -> a wave of the group's size, or None where the target cannot
        self._beams: dict[int, tuple[BeamWave, ContinuousCalls] | None] = {}
        self._admitting = threading.Lock()  # the counts of decodes, and the waves made so far
        self._counting = threading.Lock()
        self.calls = 0
        self.decoding = self.drafting = 0
        self.listeners: list[Callable[[int], None]] = []  # each hears the asks of every call, after it

    @contextlib.contextmanager
    def admit(self) -> Iterator[Admission]:
        """Around one decode (all its windows): it drafts only if fewer than ``speculate_rows`` run beside it."""
        with self._admitting:
            admission = Admission(self.decoding < self.speculate_rows, self.decoding)
            self.decoding += 1
            self.drafting += admission.drafts
        try:
            yield admission
        finally:
            with self._admitting:
                self.decoding -= 1
                self.drafting -= admission.drafts

    def target(self, inner: Target) -> Target:
        """``inner`` (the target the group belongs to) whose sessions are rows verified by this scheduler."""
        return ScheduledTarget(inner, self)

    def beam_target(self, inner: Target) -> Target:
        """``inner`` whose sessions are prepared alone and whose beam rows step in this scheduler's waves."""
        return ScheduledBeams(inner, self)

    def join(self, request: Request, threads: int) -> TargetSession:
        """``request`` prepared into a row of the group (waiting for one to be free), verified from now on."""
        return self._rows.enter(lambda: self.group.prepare(request, threads))

    def leave(self, session: TargetSession) -> None:
        """``session`` verifies no more: nobody waits for it, and its row is free."""
        self._rows.leave(id(session))

    def verify(self, session: TargetSession, root: int, candidates: Sequence[int]) -> list[int]:
        """``session``'s predictions, from the next call that takes it."""
        return self._rows.ask(id(session), (session, root, candidates))

    def beam_rows(self, session: TargetSession, width: int) -> BeamRows | None:
        """``session``'s (prepared alone) ``width`` rows in this scheduler's wave of that width, each step one
        call with the other requests' rows (waiting for a free window of the wave); None where the target makes
        no wave."""
        with self._admitting:
            if width not in self._beams:
                wave = self._beam_wave(width) if self._beam_wave is not None else None
                self._beams[width] = None if wave is None else (wave, ContinuousCalls(wave.step, wave.size,
                                                                                      self._heard))
            place = self._beams[width]
        if place is None:
            return None
        wave, steps = place
        key = id(session)
        return steps.enter(lambda: wave.rows(session, width, lambda staged: steps.ask(key, (session, staged))), key)

    def leave_beams(self, session: TargetSession) -> None:
        """``session``'s beam rows step no more: the other requests stop waiting for them."""
        for place in list(self._beams.values()):
            if place is not None:
                place[1].leave(id(session))

    def _heard(self, asks: int) -> None:
        with self._counting:  # the rows' calls and each wave's may end at once
            self.calls += 1
        for listener in self.listeners:
            listener(asks)


class _Scheduled(TargetWrapper):
    """``target`` whose calls the scheduler gathers; it offers no window group of its own (its windows already
    share the scheduler's calls)."""

    def __init__(self, target: Target, scheduler: Scheduler) -> None:
        super().__init__(target)
        self.__dict__.pop("window_group", None)
        self.scheduler = scheduler


class ScheduledTarget(_Scheduled):
    """``target`` whose every prepared request is a row of the scheduler."""

    def prepare(self, request: Request, threads: int) -> TargetSession:
        return GatheredSession(self.scheduler.join(request, threads), self.scheduler)


class ScheduledBeams(_Scheduled):
    """``target`` whose sessions are prepared alone, as one request's, and whose beam rows step in the scheduler's
    wave of their width (``together.BeamPlace``): the beam searches of every request, one call a step."""

    def prepare(self, request: Request, threads: int) -> TargetSession:
        return BeamWaveSession(self.inner.prepare(request, threads), self)

    def rows(self, session: TargetSession, width: int) -> BeamRows | None:
        return self.scheduler.beam_rows(session, width)

    def leave(self, session: TargetSession) -> None:
        self.scheduler.leave_beams(session)


def _batch_costs(profile: dict) -> tuple[dict[int, tuple[float, float]], float] | None:
    """The profile's ``batch_s`` as rows -> (a call 1 wide, a call ``width`` wide times the drafters' slowdown of
    the target's calls: ``batch_s.verify_slowdown``, else the profile's ``slowdown`` at that width), in seconds, and
    ``tokens_per_call`` (a drafting row's tokens per call); None where the profile did not measure batches. Both
    rules below price from this one reading."""
    batch = profile.get("batch_s")
    if not batch or not batch.get("rows") or not batch.get("tokens_per_call"):
        return None
    try:
        width = str(batch["width"])
        slowdown = batch.get("verify_slowdown") or (  # measured with the batches, else the profile's own
            (profile.get("slowdown") or {}).get("verify_shared_over_alone", {}).get(width, 1.0))
        costs = {int(rows): (float(cost["1"]["median"]), float(cost[width]["median"]) * slowdown)
                 for rows, cost in batch["rows"].items()}
        return costs, float(batch["tokens_per_call"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"the profile's batch costs (batch_s) are not as `as2d profile` writes them: {exc!r}") from None


def drafting_pays_alone(profile: dict) -> bool | None:
    """Whether one request decoded alone ends sooner drafting than target-only, from its audio's arrival to its last
    token: the profile's real decodes of its calibration request (``batch_s.alone_e2e_s``, medians); None where the
    profile did not measure it (profiles made before it).

    The batch costs price the target's calls alone. Where the drafter costs nearly what the target does (CTranslate2's
    whisper-tiny.en on a 2-core AVX2 host: 10 ms a token against the target's 12 ms), its audio encoding beside the
    target's doubles the target's and outweighs the calls the drafts save (BENCHMARKS.md section 23); a decode that
    loses alone loses in a batch too, where every rule below says drafting pays less.
    """
    clocks = (profile.get("batch_s") or {}).get("alone_e2e_s")
    if not clocks:
        return None
    try:
        return float(clocks["as2d"]) < float(clocks["target-only"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the profile's batch_s.alone_e2e_s is not as `as2d profile` writes it: {exc!r}") from None


def speculate_rows_from(profile: dict) -> int | None:
    """The largest batch at which drafting pays, from a device profile (``as2d profile``'s ``batch_s``), or None
    where the profile did not measure batches.

    Where the profile timed whole waves (``timed_waves``), drafting pays at B rows while a wave of B drafting ends
    before one of B target-only, at B and every batch below it. Else, from the calls alone: at a batch of B rows,
    all drafting, a call ``width`` wide per row beside the drafters commits ``tokens_per_call`` tokens a row where a
    target-only call commits one: drafting pays while ``cost(B, width) * slowdown(width) / cost(B, 1) <
    tokens_per_call``. A wider call costs more as the batch fills (the cores, not the weights' reading, become the
    limit), so the rule holds up to some B. Where one request alone is slower drafting (``drafting_pays_alone``),
    no batch drafts.
    """
    price = _wave_pricer(profile)
    if price is None:
        return None
    if drafting_pays_alone(profile) is False:
        return 0
    pays = 0
    for rows in price.sizes:
        if not price(rows, True) < price(rows, False):
            break
        pays = rows
    return pays


def timed_waves(profile: dict) -> dict[int, dict[bool, float]] | None:
    """Seconds per committed token of a whole wave of B rows, drafting (True) or not, from the profile's waves
    decoded side by side (``batch_s.waves_e2e_s``, ``wave_row_tokens`` a row; one row: ``alone_e2e_s``), arrival to
    last token: the drafters' encoding and their share of the cores are in it, as the calls' costs are not. None
    where the profile did not time waves (profiles made before them)."""
    batch = profile.get("batch_s") or {}
    waves, tokens = batch.get("waves_e2e_s"), batch.get("wave_row_tokens")
    if not waves or not tokens:
        return None
    try:
        timed = {int(rows): {True: float(clock["as2d"]) / (int(rows) * tokens),
                             False: float(clock["target-only"]) / (int(rows) * tokens)}
                 for rows, clock in waves.items()}
        if batch.get("alone_e2e_s"):
            alone = batch["alone_e2e_s"]
            timed.setdefault(1, {True: float(alone["as2d"]) / tokens, False: float(alone["target-only"]) / tokens})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"the profile's batch_s.waves_e2e_s is not as `as2d profile` writes it: {exc!r}") from None
    return timed


@attrs.frozen
class _WavePricer:
    """Seconds per committed token of a wave of ``rows`` rows, drafting or not: from whole waves timed where the
    profile has them, else from its calls. ``sizes``: the batch sizes it measured; a wave of a size it did not
    costs what one of the next size up does (an upper bound)."""

    sizes: tuple[int, ...]
    waves: dict[int, dict[bool, float]] | None
    costs: dict[int, tuple[float, float]]
    tokens_per_call: float

    def __call__(self, rows: int, drafts: bool) -> float:
        measured = [size for size in self.sizes if size >= rows]
        size = min(measured) if measured else max(self.sizes)
        if self.waves is not None:  # the measured wave's clock, over this wave's tokens
            return self.waves[size][drafts] * size / rows
        one, wide = self.costs[size]
        return _per_token(wide if drafts else one, rows, self.tokens_per_call if drafts else 1.0)


def _wave_pricer(profile: dict) -> _WavePricer | None:
    """The profile's one reading for both rules (``wave_prices``, ``speculate_rows_from``); None where it measured
    no batches."""
    waves = timed_waves(profile)
    measured = _batch_costs(profile)
    if waves is None and measured is None:
        return None
    costs, tokens_per_call = measured or ({}, 1.0)
    return _WavePricer(tuple(sorted(waves or costs)), waves, costs, tokens_per_call)


def _per_token(call_s: float, rows: int, tokens_per_row: float) -> float:
    """Seconds per committed token of a call of ``rows`` rows that commits ``tokens_per_row`` a row: both rules
    price with this one expression, so a near-tie rounds the same way in each."""
    return call_s / (rows * tokens_per_row)


WAVE_SIZES = (1, 2, 4, 8)  # the wave sizes ``batch_windows = "auto"`` chooses from (as2d profile's rows)


@attrs.frozen
class WavePrice:
    """One way to decode a file's windows: waves of ``size``, drafting or not, and its price per committed token."""

    size: int
    drafts: bool
    seconds_per_token: float


def wave_prices(profile: dict, windows: int, can_draft: bool = True) -> list[WavePrice] | None:
    """Every way to decode ``windows`` windows in waves, priced by the profile, cheapest first (None where the
    profile did not measure batches; ``can_draft``: False prices target-only waves alone).

    Where the profile timed whole waves (``timed_waves``), a wave's price is its measured seconds per token. Else
    from the calls: a wave of B rows target-only commits B tokens per call of cost(B, 1); drafting, about
    ``tokens_per_call`` a row per call of cost(B, width) * slowdown(width) (``_batch_costs``). Either way at a given
    B drafting is the cheaper of the two exactly where ``speculate_rows_from`` says it pays. Each size of
    ``WAVE_SIZES`` the profile measured is capped by ``windows``; the file is priced whole, as if every window had as
    many tokens: full waves, then the last, smaller one. A size the profile did not measure (a wave of 3) is priced
    at the next one it did (4): an upper bound. Ties go to the smaller wave, then to target-only. Where one request
    alone is slower drafting (``drafting_pays_alone``), only target-only waves are priced.
    """
    price = _wave_pricer(profile)
    if price is None:
        return None
    can_draft = can_draft and drafting_pays_alone(profile) is not False
    windows = max(1, windows)
    prices = []
    for size in sorted({min(size, windows) for size in WAVE_SIZES if size in price.sizes}):
        for drafts in (False, True) if can_draft else (False,):
            prices.append(WavePrice(size, drafts, file_price(price, size, windows, drafts)))
    return sorted(prices, key=lambda p: (p.seconds_per_token, p.size, p.drafts)) or None


def file_price(price: Callable[[int, bool], float], size: int, windows: int, drafts: bool) -> float:
    """Seconds per token of ``windows`` windows in waves of ``size``: full waves, then the last, smaller one (the
    windows' average)."""
    full, rest = divmod(windows, size)
    whole = price(size, drafts)
    return whole if not rest else (full * size * whole + rest * price(rest, drafts)) / windows


def drafting_pays_in_waves(profile: dict, size: int, windows: int) -> bool | None:
    """Whether ``windows`` windows in waves of ``size`` (the user's) end sooner drafting, by the profile's prices
    (``wave_prices``' reading); None where it did not measure batches."""
    price = _wave_pricer(profile)
    if price is None:
        return None
    if drafting_pays_alone(profile) is False:
        return False
    size = max(1, min(size, windows))
    return file_price(price, size, windows, True) < file_price(price, size, windows, False)


def scheduler_for(target: Target, rows: int, threads: int, speculate_rows: int = SPECULATE_ROWS) -> Scheduler | None:
    """A scheduler over a group of ``rows`` rows of ``target`` (and beam waves of ``rows`` requests where it makes
    them), or None where the target cannot batch."""
    group = target.window_group(rows, threads) if isinstance(target, WindowBatching) else None
    if group is None:
        return None
    waves = (lambda width: target.beam_wave(rows, width, threads)) if isinstance(target, BeamWaves) else None
    return Scheduler(group, speculate_rows, waves)
