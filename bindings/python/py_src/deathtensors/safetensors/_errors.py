"""The exception of the safetensors API."""


class SafetensorError(Exception):
    """An error reported through the safetensors API (safetensors 0.8.0's
    ``SafetensorError``, with its messages). The deathtensors error that
    caused it, if any, is its ``__cause__``."""


# Shown in tracebacks as the package's, where callers import it from.
SafetensorError.__module__ = "deathtensors.safetensors"
