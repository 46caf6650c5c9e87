"""Benchmarks: every registered method (the serial baselines among them) beside the outside peers, and the
``as2d bench`` command (Section 4, Appendix D)."""
