"""Device profiles, trace replay and offline budget selection (Section 4.3, Appendix B.2, D.2-D.4)."""
