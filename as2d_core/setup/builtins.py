"""The core's own parts, registered through the same hooks as any plugin."""
from tokenizer_bridges import IdentityBridge, TextBridge

from as2d_core.setup.hookspecs import hookimpl


@hookimpl
def register_bridges(register):
    # identity connects no pair by pattern: it is chosen whenever the two vocabularies are equal
    register("identity", IdentityBridge.for_request, description="drafter shares the target's tokenizer: ids pass through",
             connects=())
    register("text", TextBridge.for_request,
             description="drafter ids -> text -> target ids, holding back an unfinished word",
             connects=(("*", "*"),), needs=("decodes_text", "encodes_text"))


@hookimpl
def register_methods(register):
    from as2d_core.decode.methods import BUILTIN

    for method in BUILTIN:
        register(method)
