"""elastic.State's overlapped commit, in one process: commit() returns while
a background thread still copies the parameters and the optimizer's state,
and the optimizer's next step waits for that copy, so the snapshot holds
the values at the commit. The copy is made slow on purpose (each clone
waits 0.1 s), so a step that did not wait would change what is being copied
and restore() would give the stepped values: deterministic, not a race the
test may or may not see. Also: buffers (a forward may change them) are
copied at once; torch's LR schedulers wrap the guarded step before or after
State; overlap_commit=False, or no optimizer, copies inside commit(); a copy
that fails leaves no snapshot in force."""
import time
import warnings

import torch

from distkit import elastic
from distkit.elastic import state as state_module
from testing.python.rank_check import check, finish

slow_clones = [0]
real_run = state_module._BackgroundCopy._run


def slow_run(self):
    """The background copy, each tensor's clone 0.1 s late."""
    real_clone = torch.Tensor.clone

    def late_clone(t, *args, **kwargs):
        time.sleep(0.1)
        slow_clones[0] += 1
        return real_clone(t, *args, **kwargs)
    for container, key in self._slots:
        container[key] = late_clone(container[key].detach())


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)


def train_step(model, opt, seed):
    g = torch.Generator().manual_seed(seed)
    opt.zero_grad()
    model(torch.randn(16, 4, generator=g)).square().mean().backward()
    opt.step()


def values(model, opt):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {i: {n: t.clone() for n, t in s.items() if isinstance(t, torch.Tensor)}
             for i, s in opt.state_dict()["state"].items()})


def same(a, b):
    return all(torch.equal(a[0][k], b[0][k]) for k in a[0]) and \
        a[1].keys() == b[1].keys() and \
        all(torch.equal(a[1][i][n], b[1][i][n]) for i in a[1] for n in a[1][i])


def overlapped(scheduler_first):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        overlapped_steps(scheduler_first)
    told = [str(w.message) for w in caught if "optimizer.step()" in str(w.message)]
    check(not told, f"the LR scheduler sees the optimizer's steps: {told}")


def overlapped_steps(scheduler_first):
    model, opt = model_and_optimizer()
    if scheduler_first:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    state = elastic.State(model=model, optimizer=opt)
    if not scheduler_first:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    train_step(model, opt, 1)  # momentum exists
    sched.step()
    at_commit = values(model, opt)
    before = slow_clones[0]
    started = time.monotonic()
    state.commit()
    took = time.monotonic() - started
    deferred = len(list(model.parameters())) * 2  # parameters and momentum
    check(took < 0.1 * deferred / 2,
          f"commit() returned after {took:.2f} s, before the copy's {0.1 * deferred:.1f} s "
          f"(scheduler {'before' if scheduler_first else 'after'} State)")
    model.train()
    model(torch.randn(16, 4))  # changes BatchNorm's running statistics
    train_step(model, opt, 2)  # its step waits for the copy
    check(slow_clones[0] - before == deferred,
          f"the copy cloned the {deferred} parameters and momentum buffers "
          f"({slow_clones[0] - before})")
    sched.step()
    check(not same(values(model, opt), at_commit), "training moved on after the commit")
    state.restore()
    check(same(values(model, opt), at_commit),
          "restore() gives the values at the commit (parameters, buffers, momentum)")
    train_step(model, opt, 3)  # a step after restore, the scheduler's after it
    sched.step()


def synchronous():
    model, opt = model_and_optimizer()
    state = elastic.State(model=model, optimizer=opt, overlap_commit=False)
    train_step(model, opt, 1)
    at_commit = values(model, opt)
    before = slow_clones[0]
    state.commit()
    check(slow_clones[0] == before and state._copying is None,
          "overlap_commit=False: nothing left to a background copy")
    train_step(model, opt, 2)
    state.restore()
    check(same(values(model, opt), at_commit), "overlap_commit=False restores the commit")


def without_optimizer():
    """Nothing would wait for a copy: State copies inside commit()."""
    model, _ = model_and_optimizer()
    state = elastic.State(model=model)
    at_commit = {k: v.clone() for k, v in model.state_dict().items()}
    state.commit()
    with torch.no_grad():
        model[0].weight.add_(1.0)  # in place, no optimizer step to wait
    state.restore()
    check(all(torch.equal(v, at_commit[k]) for k, v in model.state_dict().items()),
          "without an optimizer, restore() gives the commit's values")


def failed_copy():
    """A copy that fails leaves no half-copied snapshot in force."""
    model, opt = model_and_optimizer()
    state = elastic.State(model=model, optimizer=opt)
    train_step(model, opt, 1)

    def failing_run(self):
        self._error = MemoryError("no memory for the copy (simulated)")
    state_module._BackgroundCopy._run = failing_run
    try:
        state.commit()
    finally:
        state_module._BackgroundCopy._run = slow_run
    try:
        train_step(model, opt, 2)
        check(False, "the optimizer's step raises the failed copy")
    except RuntimeError as e:
        check("copy failed" in str(e), f"the step names the failed copy: {e}")
    try:
        state.restore()
        check(False, "restore() after a failed copy raises")
    except RuntimeError as e:
        check("nothing committed" in str(e), f"restore() holds no half-copied snapshot: {e}")


def main():
    state_module._BackgroundCopy._run = slow_run
    try:
        overlapped(scheduler_first=False)
        overlapped(scheduler_first=True)
        synchronous()
        without_optimizer()
        failed_copy()
    finally:
        state_module._BackgroundCopy._run = real_run
    return finish("elastic commit overlap")


if __name__ == "__main__":
    raise SystemExit(main())
