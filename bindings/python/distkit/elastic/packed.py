"""A nested state (dicts, lists and tuples of tensors and plain values: a
sharded state dict, an optimizer's) as one byte tensor and back, for the
shards a sharded snapshot sends to its peers (exchange.py).

The tensors' bytes are copied into the buffer by torch (outside Python's
lock, so a commit's exchange on its own thread leaves the training thread
free), after a small header: the structure, pickled, with each tensor
replaced by its place. torch.save into memory held that lock for every
copy, which the training thread then waited for."""
import pickle
from collections import OrderedDict
from typing import Any, List, Optional

import torch

_ALIGN = 64  # each tensor's bytes start here, so any dtype may view them
_LENGTH = 8  # the header's length, little-endian, first


class _Place:
    """Where a tensor's bytes are in the buffer (past the header), and
    whether it was on a GPU (unpacked onto the receiver's own)."""

    def __init__(self, offset: int, dtype: torch.dtype, shape: tuple, cuda: bool):
        self.offset, self.dtype, self.shape, self.cuda = offset, dtype, shape, cuda


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _skeleton(obj, tensors: List[torch.Tensor], at: List[int]):
    if isinstance(obj, torch.Tensor):
        t = obj.detach().contiguous()
        place = _Place(at[0], t.dtype, tuple(t.shape), t.is_cuda)
        tensors.append(t)
        at[0] = _aligned(at[0] + t.numel() * t.element_size())
        return place
    if type(obj) in (dict, OrderedDict):
        return type(obj)((k, _skeleton(v, tensors, at)) for k, v in obj.items())
    if type(obj) in (list, tuple):
        return type(obj)(_skeleton(v, tensors, at) for v in obj)
    return obj


def pack(obj) -> torch.Tensor:
    """``obj`` as one uint8 tensor."""
    tensors: List[torch.Tensor] = []
    at = [0]
    header = pickle.dumps(_skeleton(obj, tensors, at))
    base = _aligned(_LENGTH + len(header))
    out = torch.empty(base + at[0], dtype=torch.uint8)
    out[:_LENGTH] = torch.tensor(list(len(header).to_bytes(_LENGTH, "little")),
                                 dtype=torch.uint8)
    out[_LENGTH:_LENGTH + len(header)] = torch.frombuffer(bytearray(header), dtype=torch.uint8)
    offset = 0
    for t in tensors:
        n = t.numel() * t.element_size()
        if n:
            out[base + offset:base + offset + n] = t.reshape(-1).view(torch.uint8)
        offset = _aligned(offset + n)
    return out


def _rebuilt(obj, data: torch.Tensor, device: Optional[torch.device]):
    if isinstance(obj, _Place):
        n = 1
        for d in obj.shape:
            n *= d
        size = torch.empty((), dtype=obj.dtype).element_size()
        piece = data[obj.offset:obj.offset + n * size].view(obj.dtype).reshape(obj.shape)
        if obj.cuda and device is not None:
            return piece.to(device)
        # A copy of its own: the tensor outlives the received buffer's use.
        return piece.clone()
    if type(obj) in (dict, OrderedDict):
        return type(obj)((k, _rebuilt(v, data, device)) for k, v in obj.items())
    if type(obj) in (list, tuple):
        return type(obj)(_rebuilt(v, data, device) for v in obj)
    return obj


def unpack(buffer: torch.Tensor, device: Optional[torch.device] = None) -> Any:
    """What ``pack`` made ``buffer`` from; tensors that were on a GPU go to
    ``device`` (this rank's: the sender's index means nothing here), the
    others stay in host memory."""
    length = int.from_bytes(bytes(buffer[:_LENGTH].tolist()), "little")
    header = bytes(buffer[_LENGTH:_LENGTH + length].numpy())
    return _rebuilt(pickle.loads(header), buffer[_aligned(_LENGTH + length):], device)
