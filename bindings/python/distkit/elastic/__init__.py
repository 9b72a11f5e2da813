"""Training that survives a lost rank without a restart or a checkpoint file,
in the manner of Horovod's ``hvd.elastic``::

    from distkit import dist, elastic

    dist.init_dist("pytorch")              # a replacement joins the grown world here
    model = MMDistributedDataParallel(net)   # before elastic.run, on every rank
    sampler = elastic.ElasticSampler(len(dataset), global_batch_size=64)
    state = elastic.State(model=model, optimizer=opt, sampler=sampler, epoch=0)

    def train(state):
        while state.epoch < EPOCHS:
            for indices in state.sampler:  # this rank's share of a global batch
                idx = torch.tensor(indices, dtype=torch.long)  # may be empty
                losses = ...per-sample losses on dataset[idx] (reduction="none")...
                loss = state.sampler.weighted_loss(losses)
                ...backward, optimizer step...
                if state.sampler.batch % 10 == 0:
                    state.commit()          # an in-memory snapshot
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    elastic.run(train, state)

``weighted_loss`` is ``losses.mean() * sampler.loss_weight()`` where the
share has samples (that recipe stays valid there); a global batch with
fewer indices than ranks leaves some shares empty, whose mean is NaN, and
there it gives a finite zero. Every rank runs the forward and backward, an
empty share too (DDP's and FSDP's collectives need every rank).

When a rank is lost, ``train`` raises on the survivors; ``run`` gets the job
a new world (a replacement grown in under ``distrun --max-replacements``, or
the survivors shrunk under ``distrun --min-ranks``), re-wraps the model on
it, gives every rank the newest committed snapshot from a survivor's memory
and calls ``train`` again. See state.py, sampler.py, membership.py,
peer_sync.py and loop.py."""
from .loop import run
from .sampler import ElasticSampler
from .state import State

__all__ = ["ElasticSampler", "State", "run"]
