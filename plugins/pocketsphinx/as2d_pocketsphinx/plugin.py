"""as2d plugin hooks for PocketSphinx (entry point ``pocketsphinx`` in group ``as2d``).

Listing plugins must not load the recogniser, so the factory imports it lazily.
"""
from __future__ import annotations

from as2d_core.decode.chunked import DEFAULT_CHUNK_S
from as2d_core.setup.hookspecs import hookimpl

INSTALL = "pip install ./plugins/pocketsphinx"


def _source(options: dict):
    from .source import PocketSphinxSource

    return PocketSphinxSource(
        preset=options.get("preset", "fast"),
        chunk_s=float(options.get("chunk_s", DEFAULT_CHUNK_S)),
        casing=bool(options.get("casing", True)),
        model_dir=options.get("model_dir"),
        feed_s=float(options.get("feed_s", 0.1)),
    )


@hookimpl
def register_sources(register):
    from .source import PocketSphinxSource  # light: the recogniser loads when a source is built

    register(
        "pocketsphinx",
        _source,
        description="PocketSphinx 5 US-English, one decode per 2.56 s audio chunk (models ship in its wheel)",
        tasks=("asr",),
        languages=tuple(sorted(PocketSphinxSource.languages)),
        vocabulary="pocketsphinx-words",
        backends=(),
        required_files=(),
        layout="none: acoustic model, language model and dictionary ship inside the pocketsphinx wheel",
        install=INSTALL,
    )
