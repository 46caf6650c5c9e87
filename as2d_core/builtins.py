"""The core's own parts, registered through the same hooks as any plugin."""
from tokenizer_bridges import IdentityBridge, TextBridge

from .hookspecs import hookimpl


@hookimpl
def register_bridges(register):
    register("identity", IdentityBridge, description="drafter shares the target's tokenizer")
    register("text", TextBridge, description="drafter ids -> text -> target ids, holding back an unfinished word")
