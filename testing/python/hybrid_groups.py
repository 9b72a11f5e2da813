"""The node and replica groups the HYBRID_SHARD tests build by hand."""

from distkit import dist


def hybrid_groups():
    """Nodes of two ranks when the world divides (else one node), and the
    replicate groups across them: (this rank's node group, its replicas)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    local = 2 if n % 2 == 0 else n
    mine = [None, None]
    for node in range(n // local):
        g = dist.new_group(list(range(node * local, (node + 1) * local)))
        if rank // local == node:
            mine[0] = g
    for i in range(local):
        g = dist.new_group(list(range(i, n, local)))
        if rank % local == i:
            mine[1] = g
    return tuple(mine)
