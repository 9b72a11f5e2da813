"""ElasticSampler: the data a job has not seen yet, shared out again at every
change of membership, with the global batch kept.

Each epoch is a sequence of global batches of ``global_batch_size`` indices
(a seeded permutation, the same on every rank). At every step each rank takes
its share of that step's global batch, by its rank and the world size at
that moment: after a shrink the survivors' shares grow, after a grow they
shrink again, and every step still trains on the same samples as an
uninterrupted run. Its result does not depend on the membership when each
rank's mean loss is multiplied by ``loss_weight()`` (its share's size times
the world size over the global batch): data-parallel training averages the
ranks' gradients, and an average of means equals the global batch's mean
only when the shares are equal (1.0 then). The position (epoch, batch) is
saved and restored with elastic.State.

A global batch with fewer indices than ranks (the last one of an epoch
under drop_last=False, or a small global batch after a grow) leaves some
ranks an empty share: no sample is repeated or invented for them, since
that would change the step (BatchNorm's statistics, metrics). Such a rank
must still run the forward and backward (DDP's and FSDP's collectives need
every rank), and the mean of its no losses is NaN: ``weighted_loss(losses)``,
given the per-sample losses (``reduction="none"``), is finite there, a zero
still connected to the model, and equals ``losses.mean() * loss_weight()``
on every other share.
"""
from typing import Any, Dict, Iterator, List

import torch

from .. import dist


class ElasticSampler:
    """``for indices in sampler:`` yields this rank's share of each
    remaining global batch of the epoch (a list of dataset indices);
    ``sampler.batch`` is the global batch the next one comes from."""

    def __init__(self, dataset_size: int, global_batch_size: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = True):
        if global_batch_size <= 0 or dataset_size <= 0:
            raise ValueError(f"ElasticSampler: dataset_size {dataset_size} and global_batch_size "
                             f"{global_batch_size} must be positive")
        self.dataset_size = dataset_size
        self.global_batch_size = global_batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.batch = 0
        self._order = None  # (epoch, seed, permutation) of the last epoch asked
        self._weight = 1.0
        self._last = None  # (share size, world size, global batch size) last yielded

    def __len__(self) -> int:
        """Global batches per epoch."""
        full, rest = divmod(self.dataset_size, self.global_batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch`` from its first batch."""
        self.epoch = epoch
        self.batch = 0

    def global_batch(self, batch: int) -> List[int]:
        """The indices of the epoch's ``batch``-th global batch."""
        if self._order is None or self._order[:2] != (self.epoch, self.seed):
            if self.shuffle:
                generator = torch.Generator()
                generator.manual_seed(self.seed + self.epoch)
                order = torch.randperm(self.dataset_size, generator=generator).tolist()
            else:
                order = list(range(self.dataset_size))
            self._order = (self.epoch, self.seed, order)
        order = self._order[2]
        start = batch * self.global_batch_size
        return order[start:start + self.global_batch_size]

    def share(self, indices: List[int], rank: int, world_size: int) -> List[int]:
        """Rank `rank`'s contiguous part of `indices`; the first
        len % world_size ranks take one more."""
        base, extra = divmod(len(indices), world_size)
        start = rank * base + min(rank, extra)
        return indices[start:start + base + (1 if rank < extra else 0)]

    def __iter__(self) -> Iterator[List[int]]:
        while self.batch < len(self):
            batch = self.global_batch(self.batch)
            indices = self.share(batch, dist.get_rank(), dist.get_world_size())
            self._weight = len(indices) * dist.get_world_size() / len(batch)
            self._last = (len(indices), dist.get_world_size(), len(batch))
            self.batch += 1
            yield indices

    def loss_weight(self) -> float:
        """For the share last yielded: multiply this rank's mean loss by it,
        so that the ranks' averaged gradients are those of the global
        batch's mean loss whatever the world size (1.0 when the global
        batch divides evenly). 0.0 for an empty share, whose mean is NaN
        (and 0.0 * NaN is NaN): use weighted_loss there."""
        return self._weight

    def weighted_loss(self, losses: torch.Tensor) -> torch.Tensor:
        """This rank's part of the global batch's mean loss, from the
        per-sample losses of the share last yielded (first dimension: its
        samples; e.g. ``F.mse_loss(out, y, reduction="none")``): their sum
        times the world size over the global batch's elements, which is
        ``losses.mean() * loss_weight()`` for a share with samples, and for
        an empty one a finite zero that still reaches the model's
        parameters (zero gradients) when ``losses`` came from its forward.
        The ranks' average of it, and of its gradients, is the global
        batch's mean loss and its gradients."""
        if self._last is None:
            raise RuntimeError("ElasticSampler.weighted_loss: no share yielded yet")
        share, world_size, batch = self._last
        if not isinstance(losses, torch.Tensor) or losses.dim() == 0 or losses.shape[0] != share:
            shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses)
            raise ValueError(f"ElasticSampler.weighted_loss: losses {shape} must be per "
                             f"sample, first dimension {share} (this rank's share; compute "
                             f"them with reduction=\"none\")")
        per_sample = 1
        for size in losses.shape[1:]:
            per_sample *= size
        if per_sample == 0:
            raise ValueError(f"ElasticSampler.weighted_loss: losses {tuple(losses.shape)} "
                             f"have no element per sample")
        return losses.sum() * (world_size / (batch * per_sample))

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "batch": self.batch, "seed": self.seed}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.epoch, self.batch, self.seed = state["epoch"], state["batch"], state["seed"]
