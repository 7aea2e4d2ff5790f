"""URLs of remote checkpoints (``s3://``, ``gs://``, ``az://``,
``http(s)://``): recognised wherever a path is accepted, and opened by the
native core with ranged requests (``deathtensors-remote``)."""

import os
from typing import Any, List, Mapping, Optional, Tuple, Union

from . import _native

#: The URL schemes the native core opens (``deathtensors-remote``'s list).
SCHEMES = tuple(_native.URL_SCHEMES)


def is_url(path: Union[str, "os.PathLike[str]"]) -> bool:
    """Whether ``path`` is a URL of a remote store rather than a local path."""
    return isinstance(path, str) and path.lower().startswith(SCHEMES) and len(path) > path.index("//") + 2


def pairs(storage_options: Optional[Mapping[str, Any]]) -> Optional[List[Tuple[str, str]]]:
    """``storage_options`` (object_store's keys, as fsspec users pass them:
    ``{"aws_endpoint": ..., "aws_region": ..., "allow_http": True}``) as the
    string pairs the native uploads take (opens take the dict itself, in
    ``ReadOptions``)."""
    if storage_options is None:
        return None
    if not isinstance(storage_options, Mapping):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    return [(str(k), str(v).lower() if isinstance(v, bool) else str(v)) for k, v in storage_options.items()]
