"""Parakeet CTC as a chunked as2d drafter (see ``source.ParakeetSource``)."""
