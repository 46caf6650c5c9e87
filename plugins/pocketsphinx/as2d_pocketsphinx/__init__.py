"""PocketSphinx as a chunked as2d drafter (see ``source.PocketSphinxSource``)."""
