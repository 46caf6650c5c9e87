"""uvicorn with a grace period: SIGINT and SIGTERM start the app's ``Drain`` and the process exits 0.

Plain uvicorn closes its socket at the first signal (a new client is refused, not told when to
retry), waits for requests in flight without a bound, and then re-raises the signal, so the process
ends by it rather than with status 0. Here the socket stays open while the app answers 503 with Retry-After and lets
decodes under way finish within ``grace_s``; uvicorn's own shutdown then only sees the last answers out.
"""
from __future__ import annotations

import sys

import uvicorn

from .admission import Drain

CLOSE_S = 10.0  # for the answers still being sent when uvicorn closes (a stopped decode ends at its next call)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain):
        super().__init__(config)
        self.drain = drain
        self._announced = False

    def handle_exit(self, sig: int, frame) -> None:
        """Start the grace period (a second signal ends it); not recorded, so uvicorn does not re-raise it."""
        self.drain.begin()

    async def on_tick(self, counter: int) -> bool:
        if self.drain.started and not self._announced:  # said here, not in the signal handler: printing is not reentrant
            self._announced = True
            print(f"as2d serve: stopping; decodes under way have {self.drain.grace_s:g} s, new requests get 503",
                  file=sys.stderr, flush=True)
        return self.drain.done() or await super().on_tick(counter)


def serve(app, host: str, port: int, log_level: str) -> None:
    """Serve ``app`` (from ``create_app``) until a stop signal and its grace period end."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=CLOSE_S)
    DrainingServer(config, app.state.drain).run()
