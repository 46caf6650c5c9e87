"""``as2d serve``: an OpenAI-compatible transcription server on the as2d core.

A client of the core (the core never imports it): models are loaded once in
``service``, requests are admitted and bounded in ``app``, uploads decoded in
``upload``, answers shaped in ``formats`` and counted in ``metrics``.
"""
