"""openpi's wire format: our packer is byte-compatible with openpi_client's in both directions."""

import msgpack
import numpy as np
import pytest

from r2a.adapters.msgpack_numpy import packb, unpackb


def _payload() -> dict:
    rng = np.random.default_rng(0)
    return {
        "observation/image": rng.integers(0, 256, (8, 6, 3), dtype=np.uint8),
        "observation/state": rng.normal(size=8).astype(np.float32),
        "actions": rng.normal(size=(4, 7)),  # float64
        "mask": np.array([True, False]),
        "empty": np.zeros((0, 7), np.float32),
        "step": np.int64(12),
        "score": np.float32(0.5),
        "prompt": "pick up the red cube",
        "nested": {"ids": np.arange(5, dtype=np.int16), "list": [1, 2.5, "x"]},
    }


def _assert_same(a, b):
    assert type(a) is type(b) or (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)))
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b) and all(_assert_same(x, y) is None for x, y in zip(a, b))
    else:
        assert a == b and getattr(a, "dtype", None) == getattr(b, "dtype", None)


def test_round_trip_keeps_dtypes_shapes_and_values():
    data = _payload()
    back = unpackb(packb(data))
    _assert_same(data, back)
    back["actions"][0, 0] = 99.0  # arrays come back writable


def test_byte_compatible_with_openpi_client_both_ways():
    openpi = pytest.importorskip("openpi_client.msgpack_numpy")
    data = _payload()
    assert packb(data) == openpi.packb(data) == openpi.Packer().pack(data)
    _assert_same(data, unpackb(openpi.packb(data)))
    _assert_same(data, openpi.unpackb(packb(data)))


def test_layout_is_the_documented_tagged_map():
    raw = msgpack.unpackb(packb({"a": np.arange(3, dtype=np.float32), "s": np.int32(7)}))
    assert raw["a"] == {b"__ndarray__": True, b"data": np.arange(3, dtype=np.float32).tobytes(),
                        b"dtype": "<f4", b"shape": [3]}
    assert raw["s"] == {b"__npgeneric__": True, b"data": 7, b"dtype": "<i4"}


def test_non_contiguous_arrays_are_sent_in_c_order():
    arr = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2].T
    np.testing.assert_array_equal(unpackb(packb(arr)), arr)


@pytest.mark.parametrize("value", [np.array([object()], dtype=object), np.zeros(2, np.complex64),
                                   np.zeros(2, dtype=[("x", "f4")]), np.complex128(1j)])
def test_object_void_and_complex_dtypes_are_refused(value):
    with pytest.raises(TypeError, match="nothing is ever pickled"):
        packb({"x": value})


def test_a_peer_sending_an_object_dtype_is_refused():
    hostile = msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]})
    with pytest.raises(TypeError, match="refused"):
        unpackb(hostile)
