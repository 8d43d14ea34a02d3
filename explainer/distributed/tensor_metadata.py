"""The metadata of a tensor dict on the generic path (vLLM ``parallel_state.py``: ``TensorMetadata`` and
``_split_tensor_dict``), encoded as tagged JSON.

vLLM pickles the metadata list. This toy encodes it as tagged JSON instead, so a peer can never make the
receiver execute code; non-tensor values must be JSON-like (None, bool, int, float, str, bytes, list, tuple,
str-keyed dict).
"""

from __future__ import annotations

import base64
import json
from collections import namedtuple
from typing import Any

import torch

__all__ = ["TensorMetadata", "split_tensor_dict", "encode_metadata", "decode_metadata"]

TensorMetadata = namedtuple("TensorMetadata", ["device", "dtype", "size"])

def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in tensor-dict metadata")
    return dt


def _encode_value(v: Any, key: str) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return {"list" if isinstance(v, list) else "tuple": [_encode_value(x, key) for x in v]}
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise TypeError(f"key {key!r}: dict values need str keys to travel in the metadata")
        return {"dict": {k: _encode_value(x, key) for k, x in v.items()}}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": base64.b64encode(v).decode()}
    raise TypeError(f"key {key!r} holds a {type(v).__name__}; the generic path carries torch.Tensor values "
                    f"or JSON-like values (None, bool, int, float, str, bytes, list, tuple, str-keyed dict)")


def _decode_value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    (tag, x), = v.items()
    if tag == "list":
        return [_decode_value(i) for i in x]
    if tag == "tuple":
        return tuple(_decode_value(i) for i in x)
    if tag == "dict":
        return {k: _decode_value(i) for k, i in x.items()}
    if tag == "bytes":
        return base64.b64decode(x)
    if tag == "tensor":
        return TensorMetadata(x["device"], _dtype(x["dtype"]), torch.Size(x["size"]))
    raise ValueError(f"unknown metadata tag {tag!r}")


def split_tensor_dict(tensor_dict: dict) -> tuple[list, list[torch.Tensor]]:
    """vLLM's split: (key, TensorMetadata) for tensors, (key, value) for anything else."""
    metadata_list, tensor_list = [], []
    for key, value in tensor_dict.items():
        if isinstance(value, torch.Tensor):
            metadata_list.append((key, TensorMetadata(value.device.type, value.dtype, value.size())))
            tensor_list.append(value)
        else:
            metadata_list.append((key, value))
    return metadata_list, tensor_list


def encode_metadata(metadata_list: list) -> bytes:
    items = []
    for key, value in metadata_list:
        if not isinstance(key, str):
            raise TypeError(f"key {key!r}: tensor-dict keys must be str")
        if isinstance(value, TensorMetadata):
            enc = {"tensor": {"device": value.device, "dtype": _dtype_name(value.dtype), "size": list(value.size)}}
        else:
            enc = _encode_value(value, key)
        items.append([key, enc])
    return json.dumps(items, separators=(",", ":")).encode()


def decode_metadata(data: bytes) -> list:
    return [(key, _decode_value(enc)) for key, enc in json.loads(data.decode())]
