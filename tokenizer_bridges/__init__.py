"""Drafter-vocabulary to target-vocabulary bridges.

``bridge_for`` picks the identity bridge when drafter and target share a
tokenizer and the text bridge otherwise. Conversion runs in the producer
thread: its cost belongs to drafting (Appendix C.1).
"""
from .identity import IdentityBridge
from .text import TextBridge

__all__ = ["IdentityBridge", "TextBridge", "bridge_for"]


def bridge_for(source, target, session):
    """A fresh bridge for one request of ``target`` (its prepared ``session``) fed by ``source``."""
    if source.vocabulary == target.vocabulary:
        return IdentityBridge(source.eos_token, session.eos_token)
    return TextBridge(source.decode_text, session.encode_text, session.eos_token)
