"""Drafter-vocabulary to target-vocabulary bridges.

The core registers them as the ``identity`` and ``text`` bridges (``as2d_core.setup.builtins``);
whichever registered bridge connects a source and a target is chosen once, when they load
(``as2d_core.setup.catalog.resolve_bridge``), and builds each request's bridge, so a plugin's own
bridge runs the same way. Conversion runs in the producer thread: its cost belongs to drafting
(Appendix C.1).
"""
from .identity import IdentityBridge
from .text import TextBridge

__all__ = ["IdentityBridge", "TextBridge"]
