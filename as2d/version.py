"""The installed as2d's version (faster-whisper's ``faster_whisper.version``)."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("as2d")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
