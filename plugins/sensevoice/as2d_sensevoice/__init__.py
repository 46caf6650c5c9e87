"""SenseVoice Small as a chunked as2d drafter (see ``source.SenseVoiceSource``)."""
