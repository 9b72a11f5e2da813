"""Bytes to chosen peers in one collective: what a sharded snapshot needs
(each rank's shard to its neighbour; a lost shard to the rank that takes
it), without handing every rank every shard as broadcasts would. The sizes
go first (an all_gather of one row each), then one all_to_all with uneven
splits over the default group."""
import ctypes
from typing import Dict

import torch

from .. import dist
from .._dlpack import Borrowed
from .._lib import lib, raise_for_status


def exchange(outgoing: Dict[int, bytes]) -> Dict[int, bytes]:
    """Collective over the default group: sends ``outgoing[dst]`` to each
    rank ``dst`` named (ranks of the default group) and returns what each
    rank sent here, by sender (senders of nothing left out)."""
    n, me = dist.get_world_size(), dist.get_rank()
    row = torch.zeros(n, dtype=torch.int64)
    for dst, payload in outgoing.items():
        row[dst] = len(payload)
    if n == 1:
        return {0: outgoing[0]} if 0 in outgoing else {}
    rows = dist.all_gather(row)
    if not any(int(r.sum()) for r in rows):
        return {}
    incoming = [int(rows[src][me]) for src in range(n)]
    sent = bytearray().join(outgoing.get(dst, b"") for dst in range(n))
    send = torch.frombuffer(sent, dtype=torch.uint8) if sent else torch.empty(0, dtype=torch.uint8)
    received = torch.empty(sum(incoming), dtype=torch.uint8)
    a, b = Borrowed(send), Borrowed(received)
    send_splits = (ctypes.c_int64 * n)(*[len(outgoing.get(dst, b"")) for dst in range(n)])
    receive_splits = (ctypes.c_int64 * n)(*incoming)
    raise_for_status(lib.dk_group_all_to_all, dist.groups.handle_of(None), a.pointer,
                     send_splits, b.pointer, receive_splits, n, None)
    out, at = {}, 0
    for src, size in enumerate(incoming):
        if size:
            out[src] = received[at:at + size].numpy().tobytes()
            at += size
    return out
