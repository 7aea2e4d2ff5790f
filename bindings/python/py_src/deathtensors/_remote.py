"""URLs of remote checkpoints (``s3://``, ``gs://``, ``az://``,
``http(s)://``): recognised wherever a path is accepted, and opened by the
native core with ranged requests (``deathtensors-remote``)."""

import os
from typing import Union

from . import _native

#: The URL schemes the native core opens (``deathtensors-remote``'s list).
SCHEMES = tuple(_native.URL_SCHEMES)


def is_url(path: Union[str, "os.PathLike[str]"]) -> bool:
    """Whether ``path`` is a URL of a remote store rather than a local path
    (``deathtensors-remote``'s rule; a path-like object never is)."""
    return isinstance(path, str) and _native.is_url(path)


