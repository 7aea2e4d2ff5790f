"""Schema: declarative checks of a file's tensors before it is loaded."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._file import DtFile, PathLike
from .errors import DeathTensorsError


class Schema:
    """What a file must hold, checked from its header alone::

        schema = dt.Schema()
        schema.expect("weight", dtype="F32", shape=[768, 768])
        schema.expect("bias", dtype="F32", shape=[768], metadata_keys=["init"])
        schema.allow_extra()          # other tensors are fine too
        schema.validate("model.dt")   # raises DeathTensorsError on a mismatch

    deathtensors 0.3.0's API and rules: every expected tensor must exist,
    with the dtype, shape and metadata keys given (None: any); tensors not
    expected are an error unless :meth:`allow_extra` was called. One
    difference: ``shape=[]`` expects a scalar (0.3.0 read it as "any
    shape")."""

    def __init__(self) -> None:
        self._expectations: Dict[str, Dict[str, Any]] = {}
        self._allow_extra = False

    def expect(
        self,
        name: str,
        dtype: Optional[str] = None,
        shape: Optional[List[int]] = None,
        metadata_keys: Optional[List[str]] = None,
    ) -> "Schema":
        """Declares an expected tensor; returns self, for chaining."""
        self._expectations[name] = {
            "dtype": dtype,
            "shape": None if shape is None else [int(d) for d in shape],
            "metadata_keys": None if metadata_keys is None else list(metadata_keys),
        }
        return self

    def __repr__(self) -> str:
        def one(name: str, e: Dict[str, Any]) -> str:
            said = [f"{k}={v!r}" for k, v in e.items() if v is not None]
            return f"{name!r}" + (f" ({', '.join(said)})" if said else "")

        expected = "; ".join(one(n, e) for n, e in self._expectations.items()) or "nothing"
        extra = ", extra tensors allowed" if self._allow_extra else ""
        return f"Schema(expects {expected}{extra})"

    def allow_extra(self, allow: bool = True) -> "Schema":
        """Whether tensors not declared with :meth:`expect` are allowed."""
        self._allow_extra = allow
        return self

    def validate(self, path_or_file: Any) -> None:
        """Checks a file (a path, or an open :class:`DtFile` or sharded
        checkpoint) and raises :class:`DeathTensorsError` naming the first
        mismatch. Reads the header only."""
        opened = not hasattr(path_or_file, "keys")
        f = DtFile(path_or_file) if opened else path_or_file
        try:
            actual = set(f.keys())
            missing = set(self._expectations) - actual
            if missing:
                raise DeathTensorsError(f"schema validation failed: missing tensors: {sorted(missing)}")
            if not self._allow_extra:
                extra = actual - set(self._expectations)
                if extra:
                    raise DeathTensorsError(
                        f"schema validation failed: unexpected tensors: {sorted(extra)} (call schema.allow_extra() to allow)"
                    )
            for name, exp in self._expectations.items():
                info = f.info(name)
                if exp["dtype"] is not None and info["dtype"] != exp["dtype"]:
                    raise DeathTensorsError(
                        f"schema validation failed: tensor {name!r} has dtype {info['dtype']}, expected {exp['dtype']}"
                    )
                if exp["shape"] is not None and list(info["shape"]) != exp["shape"]:
                    raise DeathTensorsError(
                        f"schema validation failed: tensor {name!r} has shape {list(info['shape'])}, expected {exp['shape']}"
                    )
                if exp["metadata_keys"] is not None:
                    lacking = set(exp["metadata_keys"]) - set(info["metadata"])
                    if lacking:
                        raise DeathTensorsError(
                            f"schema validation failed: tensor {name!r} is missing metadata keys {sorted(lacking)}"
                        )
        finally:
            if opened:
                f.close()


__all__ = ["Schema"]
