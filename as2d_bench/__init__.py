"""Benchmarks: serial baselines, outside peers, and the ``as2d bench`` command (Section 4, Appendix D)."""
