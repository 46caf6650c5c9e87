"""``as2d serve``: an OpenAI-compatible transcription server on the as2d core.

A client of the core (the core never imports it): models are loaded once in ``service``; ``app`` holds the
routes and error handlers, ``handling`` each request's life (admitted, decoded or streamed, watched, answered),
``admission`` the limits, the decode slots and the grace period after a stop signal; forms are read in ``form``,
uploads bounded in ``upload``, requests stopped through ``cancel``, answers shaped in ``formats`` and counted in
``metrics``; ``server`` runs it under uvicorn and ``launch`` starts it in a child process.
"""
