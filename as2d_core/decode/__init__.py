"""Decoding one request: the target loop, the proposers, the drafter's producer thread, the result.

``request.run_request`` is the entry point; ``loop.target_loop`` is the one loop every method shares.
Each name is imported from its own module, so a plugin that needs one helper (``decode.chunked``)
loads only that.
"""
