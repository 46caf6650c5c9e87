"""Drafter-vocabulary to target-vocabulary bridges.

The core registers them as the ``identity`` and ``text`` bridges (``as2d_core.setup.builtins``);
the engine builds whichever registered bridge connects a request's source and target
(``as2d_core.setup.catalog.bridge_for``), so a plugin's own bridge runs the same way. Conversion
runs in the producer thread: its cost belongs to drafting (Appendix C.1).
"""
from .identity import IdentityBridge
from .text import TextBridge

__all__ = ["IdentityBridge", "TextBridge"]
