"""Bytes (uint8 tensors) to chosen peers in one collective: what a sharded snapshot needs
(each rank's shard to its neighbour; a lost shard to the rank that takes
it), without handing every rank every shard as broadcasts would. The sizes
go first (an all_gather of one row each), then one all_to_all with uneven
splits over the default group (or the one given)."""
import ctypes
from typing import Dict

import torch

from .. import dist
from .._dlpack import Borrowed
from .._lib import lib, raise_for_status


def exchange(outgoing: Dict[int, torch.Tensor], group=None) -> Dict[int, torch.Tensor]:
    """Collective over ``group`` (default: the default group): sends the
    bytes ``outgoing[dst]`` (a 1-D uint8 tensor, packed.py) to each rank
    ``dst`` named (ranks of that group) and returns what each rank sent
    here, by sender (senders of nothing left out): views of one buffer."""
    n, me = dist.get_world_size(group), dist.get_rank(group)
    row = torch.zeros(n, dtype=torch.int64)
    for dst, payload in outgoing.items():
        row[dst] = payload.numel()
    if n == 1:
        return {0: outgoing[0]} if 0 in outgoing else {}
    rows = dist.all_gather(row, group=group)
    if not any(int(r.sum()) for r in rows):
        return {}
    incoming = [int(rows[src][me]) for src in range(n)]
    parts = [outgoing[dst] for dst in range(n) if dst in outgoing and outgoing[dst].numel()]
    # One payload (a shard to its neighbour) goes as it is; several are
    # joined in destination order by one copy (torch's, outside Python's lock).
    send = (parts[0].contiguous() if len(parts) == 1 else
            torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8))
    received = torch.empty(sum(incoming), dtype=torch.uint8)
    a, b = Borrowed(send), Borrowed(received)
    send_splits = (ctypes.c_int64 * n)(*[int(row[dst]) for dst in range(n)])
    receive_splits = (ctypes.c_int64 * n)(*incoming)
    raise_for_status(lib.dk_group_all_to_all, dist.groups.handle_of(group), a.pointer,
                     send_splits, b.pointer, receive_splits, n, None)
    out, at = {}, 0
    for src, size in enumerate(incoming):
        if size:
            out[src] = received[at:at + size]
            at += size
    return out
