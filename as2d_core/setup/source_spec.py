"""How a source is named on the command line, in a request and in a bench: ``NAME`` or ``NAME+process``.

``NAME+process`` runs the registered source ``NAME`` in its own process (``workers.process_source``), for
targets whose runtime holds the GIL. The suffix is read and written only here.
"""
from __future__ import annotations

import attrs

PROCESS_SUFFIX = "+process"


@attrs.frozen
class SourceSpec:
    """A registered source's name and whether it runs in this process."""

    name: str
    in_process: bool = True

    @classmethod
    def parse(cls, text: str) -> "SourceSpec":
        """``"x+process"`` -> ``SourceSpec("x", in_process=False)``; ``"x"`` -> ``SourceSpec("x")``."""
        if text.endswith(PROCESS_SUFFIX):
            return cls(text[: -len(PROCESS_SUFFIX)], in_process=False)
        return cls(text)

    def __str__(self) -> str:
        return self.name + ("" if self.in_process else PROCESS_SUFFIX)
