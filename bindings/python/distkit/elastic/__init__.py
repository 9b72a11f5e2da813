"""Training that survives a lost rank without a restart or a checkpoint file,
in the manner of Horovod's ``hvd.elastic``::

    from distkit import dist, elastic

    dist.init_dist("pytorch")              # a replacement joins the grown world here
    model = MMDistributedDataParallel(net)   # before elastic.run, on every rank
    sampler = elastic.ElasticSampler(len(dataset), global_batch_size=64)
    state = elastic.State(model=model, optimizer=opt, sampler=sampler, epoch=0)

    def train(state):
        for state.epoch in range(state.epoch, EPOCHS):
            for indices in state.sampler:
                ...one step on dataset[indices]...
                if state.sampler.batch % 10 == 0:
                    state.commit()          # an in-memory snapshot
            state.sampler.set_epoch(state.epoch + 1)
            state.commit()

    elastic.run(train, state)

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
