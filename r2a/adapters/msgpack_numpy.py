"""openpi's wire format: msgpack with numpy arrays and scalars as tagged maps (byte-compatible with
``openpi_client.msgpack_numpy``).

Implemented here (a few lines) so that talking to an openpi server needs no openpi package. Object, void and
complex dtypes are refused in both directions: the format never falls back to pickle, so a peer cannot make us
execute code.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

#: dtype kinds that cannot travel as raw bytes (object, void/structured, complex)
REFUSED_KINDS = ("O", "V", "c")


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.kind in REFUSED_KINDS:
        raise TypeError(f"numpy dtype {dtype} cannot be sent over the openpi wire format "
                        f"(object, void and complex dtypes are refused; nothing is ever pickled)")


def pack_array(obj: Any) -> Any:
    """msgpack ``default`` hook: numpy arrays and scalars → tagged maps; anything else unchanged."""
    if isinstance(obj, np.ndarray):
        _check_dtype(obj.dtype)
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        _check_dtype(obj.dtype)
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def unpack_array(obj: dict) -> Any:
    """msgpack ``object_hook``: tagged maps → numpy arrays (writable copies) and scalars."""
    if b"__ndarray__" in obj:
        dtype = np.dtype(obj[b"dtype"])
        _check_dtype(dtype)
        return np.ndarray(buffer=obj[b"data"], dtype=dtype, shape=tuple(obj[b"shape"])).copy()
    if b"__npgeneric__" in obj:
        dtype = np.dtype(obj[b"dtype"])
        _check_dtype(dtype)
        return dtype.type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    """Serialize a (nested) dict/list of numbers, strings, bytes and numpy values."""
    return msgpack.packb(obj, default=pack_array)


def unpackb(data: bytes) -> Any:
    """Inverse of :func:`packb`."""
    return msgpack.unpackb(data, object_hook=unpack_array)
