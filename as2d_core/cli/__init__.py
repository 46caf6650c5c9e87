"""The ``as2d`` command line: run, stream, and the commands plugins attach."""
