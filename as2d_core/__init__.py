"""as2d: audio-conditioned speculative decoding with target-decoupled drafting.

The root is kept light: importing ``as2d_core.contracts`` (every plugin and every drafter process
does) loads no audio library, no plugin manager and no other part of the core. Import each name
from its module: the contracts from ``contracts``, ``run_request`` from ``decode.request``,
``Pipeline`` from ``input.pipeline``, ``hookimpl`` from ``setup.hookspecs``.
"""
