"""distkit.model against torch.nn.parallel.DistributedDataParallel (Gloo), in
every rank of a real job: after 5 SGD steps on the same model, data and seed,
every parameter and buffer must match within 1e-6 relative (to each tensor's
largest magnitude; 1e-3 with the fp16 hook) in every mode, and mmengine's
train_step / val_step / test_step and is_model_wrapper behave as mmengine's.
A backward that raises on every rank (a hook), caught and the step taken
again, ends equal to the same training without the failure.
torch.distributed rendezvouses through a FileStore in the test's temporary directory
(distrun's store has MASTER_PORT, and no other port is sure to be free)."""
import os

import torch
import torch.distributed as tdist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from distkit import dist, errors
from distkit.model import (MMDistributedDataParallel, MMSeparateDistributedDataParallel,
                           OptimWrapper, is_model_wrapper)
from testing.python.ddp_model import (MODES, RANK, inp, make, relative_difference,
                                      target, tolerance, torch_wrap, train)


def distkit_wrap(net, mode):
    if mode == "separate":
        wrapper = MMSeparateDistributedDataParallel(net)
        assert is_model_wrapper(wrapper) and isinstance(net.fc1, MMDistributedDataParallel)
        return net
    model = MMDistributedDataParallel(net, find_unused_parameters=mode in ("find_unused",
                                                                          "unused_no_sync"),
                                      gradient_as_bucket_view=mode == "bucket_view",
                                      comm_hook="fp16" if mode == "fp16" else None)
    assert is_model_wrapper(model) and not is_model_wrapper(net)
    return model


def compare(mode, ours, ref):
    assert set(ours) == set(ref), f"{mode}: {sorted(ours)} vs {sorted(ref)}"
    tol = tolerance(mode)
    worst = 0.0
    for name, r in ref.items():
        rel = relative_difference(ours[name], r)
        worst = max(worst, rel)
        assert rel <= tol, f"{mode} {name}: relative difference {rel:.3g} > {tol}"
    return worst


class MMModel(torch.nn.Module):
    """An mmengine-style BaseModel: data_preprocessor, forward(mode=...)."""

    def __init__(self):
        super().__init__()
        self.net = make("plain")
        self.preprocessed = 0

    def data_preprocessor(self, data, training=False):
        self.preprocessed += 1
        return {"x": data["x"] * 2, "y": data["y"]}

    def forward(self, x, y, mode="tensor"):
        out = self.net(x)
        if mode == "loss":
            return {"loss_mse": F.mse_loss(out, y), "acc": (out - y).abs().mean().detach()}
        return out

    def val_step(self, data):
        return ["val", data]

    def test_step(self, data):
        return ["test", data]


def train_step_checks():
    model = MMModel()
    ddp = MMDistributedDataParallel(model)
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), accumulative_counts=2)
    # The reference: torch DDP, two micro-batches per update, the first in
    # no_sync, losses scaled by 1/2 (mmengine's gradient accumulation).
    ref = make("plain")
    ref_ddp = TorchDDP(ref)
    ref_sgd = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):
        data = {"x": inp(step, 0), "y": target(step, 0)}
        log_vars = ddp.train_step(data, optim)
        assert list(log_vars) == ["loss", "loss_mse", "acc"], list(log_vars)
        assert torch.equal(log_vars["loss"], log_vars["loss_mse"])
        loss = F.mse_loss(ref_ddp(data["x"] * 2), data["y"]) / 2
        if step % 2 == 0:
            with ref_ddp.no_sync():
                loss.backward()
        else:
            loss.backward()
            ref_sgd.step()
            ref_sgd.zero_grad()
    assert model.preprocessed == 4
    for (name, p), r in zip(model.net.named_parameters(), ref.parameters()):
        rel = ((p - r).abs().max() / r.abs().max()).item()
        assert rel <= 1e-6, f"train_step {name}: relative difference {rel:.3g}"
    assert ddp.val_step({"a": 1}) == ["val", {"a": 1}]
    assert ddp.test_step([2]) == ["test", [2]]
    try:
        ddp._run_forward(3, mode="loss")
    except TypeError as e:
        assert "should be list, tuple or dict, but got <class 'int'>" in str(e)
    else:
        raise AssertionError("a non-container batch must raise TypeError")


class FailingNet(torch.nn.Module):
    """fc2 and fc3 fill more than the reducer's first bucket (1 MiB), so
    with a small bucket_cap_mb they reach their own buckets, all launched
    before backward gets to fc1's output, where a hook raises once when
    armed. find_unused: extra is used on odd ranks only."""

    def __init__(self, find_unused):
        super().__init__()
        torch.manual_seed(RANK)  # different on every rank: the wrappers broadcast rank 0's
        self.fc1 = torch.nn.Linear(8, 32)
        self.fc2 = torch.nn.Linear(32, 9000)
        self.fc3 = torch.nn.Linear(9000, 4)
        self.extra = torch.nn.Linear(32, 4) if find_unused else None
        self.armed = False
        self.raised = 0
        self.on_raise = None  # checks run when the hook raises

    def _fail_once(self, grad):
        if self.armed:
            self.armed = False
            self.raised += 1
            if self.on_raise is not None:
                self.on_raise()
            raise RuntimeError("a failing activation hook")

    def forward(self, x):
        h = self.fc1(x)
        h.register_hook(self._fail_once)
        h = torch.relu(h)
        out = self.fc3(torch.tanh(self.fc2(h)))
        if self.extra is not None and RANK % 2 == 1:
            out = out + self.extra(h)
        return out


FAILING_MODES = ["plain", "find_unused", "no_sync", "bucket_view", "backward_again"]


def train_failing(mode, use_distkit, fail):
    """5 SGD steps on FailingNet; with `fail`, step 2's synchronized
    backward raises on every rank after buckets were launched, and the loop
    takes the step again: from its forward (gradients zeroed in place for
    plain and bucket_view, set to None otherwise) or, for backward_again,
    by running backward once more on the same graph."""
    net = FailingNet(mode == "find_unused")
    options = dict(find_unused_parameters=mode == "find_unused",
                   gradient_as_bucket_view=mode == "bucket_view", bucket_cap_mb=1e-4)
    if use_distkit:
        model = MMDistributedDataParallel(net, **options)

        def launched():
            assert model.num_buckets >= 3, model.num_buckets
            assert sum(v is not None for v in model._grad_views) >= 2, "no gradient marked yet"
        net.on_raise = launched
    else:
        model = TorchDDP(net, **options)
    sgd = torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(5):
        for attempt in range(2):
            sgd.zero_grad(set_to_none=mode not in ("plain", "bucket_view"))
            if mode == "no_sync":
                with model.no_sync():
                    F.mse_loss(model(inp(step, 1)), target(step, 1)).backward()
            net.armed = fail and step == 2 and attempt == 0
            loss = F.mse_loss(model(inp(step, 0)), target(step, 0))
            try:
                loss.backward(retain_graph=mode == "backward_again")
            except RuntimeError as e:
                assert net.armed is False and "a failing activation hook" in str(e), str(e)
                # Abandoned before the exception got here: the reducer writes
                # no bucket view that zero_grad zeroes in place.
                assert not use_distkit or not model._finalize_queued
                if mode != "backward_again":
                    continue  # the step again, from its forward
                sgd.zero_grad(set_to_none=True)
                loss.backward()
            break
        sgd.step()
    assert net.raised == (1 if fail else 0), net.raised
    return {k: v.detach().clone() for k, v in net.named_parameters()}


def backward_raises_checks():
    """A backward that raises on every rank, caught and the step taken
    again, leaves no trace: the result equals the same training without the
    failure (within 1e-6; the same sums in the same order, so in fact
    exactly), and torch DDP's without it (within 1e-4: averaging rounds
    differently from torch's by ulps, which five steps of this larger model
    carry further than the small model's 1e-6; up to 1.6e-5 measured at
    world size 3)."""
    worst, worst_torch = 0.0, 0.0
    for mode in FAILING_MODES:
        ours = train_failing(mode, use_distkit=True, fail=True)
        clean = train_failing(mode, use_distkit=True, fail=False)
        ref = train_failing(mode, use_distkit=False, fail=False)
        worst = max(worst, compare(f"backward raises ({mode})", ours, clean))
        for name, r in ref.items():
            rel = relative_difference(ours[name], r)
            worst_torch = max(worst_torch, rel)
            assert rel <= 1e-4, f"backward raises ({mode}) {name} vs torch DDP: {rel:.3g} > 1e-4"
    return worst, worst_torch


def device_placement_checks():
    """device_ids / output_device as torch defines them, where the machine
    allows: a CPU module with device_ids is torch's ValueError, on every
    rank, before any collective; without device_ids it trains as before.
    (CUDA modules: tools/gpu_check.sh.)"""
    net = make("plain")
    for device_ids in ([0], ["cuda:0"]):
        try:
            MMDistributedDataParallel(net, device_ids=device_ids, output_device=0)
        except ValueError as e:
            assert ("device_ids and output_device arguments only work with single-device/"
                    "multiple-device GPU modules or CPU modules" in str(e)), str(e)
            assert "device(type='cpu')" in str(e), str(e)
        else:
            raise AssertionError("a CPU module with device_ids must be refused")
    wrapped = MMDistributedDataParallel(net, device_ids=None, output_device=None)
    assert wrapped.device_ids is None and wrapped.output_device is None
    F.mse_loss(wrapped(inp(0, 0)), target(0, 0)).backward()


class ConvNet(torch.nn.Module):
    """A small CNN: conv weights are 4-D, so channels_last lays them out
    otherwise than contiguous (their gradients follow)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv1 = torch.nn.Conv2d(3, 6, 3)
        self.conv2 = torch.nn.Conv2d(6, 4, 3)
        self.head = torch.nn.Linear(4, 2)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(0.01 * RANK)  # the wrapper must broadcast rank 0's

    def forward(self, x):
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(h.mean(dim=(2, 3)))


def channels_last_checks():
    """A channels_last model (torch's usual CNN layout on GPUs): parameters
    and gradients that are not contiguous are lent in memory order, and 4
    steps equal torch DDP's, with gradients copied and as bucket views.
    Before, the library refused the parameters ("not contiguous")."""
    worst = 0.0
    for bucket_view in (False, True):
        results = []
        for wrap in ("distkit", "torch"):
            net = ConvNet().to(memory_format=torch.channels_last)
            assert not net.conv1.weight.is_contiguous()
            model = (MMDistributedDataParallel(net, gradient_as_bucket_view=bucket_view)
                     if wrap == "distkit"
                     else TorchDDP(net, gradient_as_bucket_view=bucket_view))
            sgd = torch.optim.SGD(net.parameters(), lr=0.1)
            for step in range(4):
                sgd.zero_grad()
                x = torch.sin(torch.arange(2 * 3 * 7 * 7, dtype=torch.float32).reshape(2, 3, 7, 7)
                              * 0.1 + RANK + step).contiguous(memory_format=torch.channels_last)
                F.mse_loss(model(x), torch.ones(2, 2) * RANK).backward()
                sgd.step()
            assert net.conv1.weight.stride() == ConvNet().to(
                memory_format=torch.channels_last).conv1.weight.stride(), "layout kept"
            results.append({k: v.detach().clone() for k, v in net.named_parameters()})
        for name, want in results[1].items():
            rel = relative_difference(results[0][name], want)
            worst = max(worst, rel)
            assert rel <= 1e-6, (f"channels_last (bucket_view={bucket_view}) {name}: "
                                 f"relative difference {rel:.3g} > 1e-6")
    # Rank 0 alone in channels_last: an error on every rank (its check meets
    # the others' reducer), not a reduction of mismatched elements, and the
    # group stays usable.
    if int(os.environ["WORLD_SIZE"]) > 1:
        net = ConvNet()
        if RANK == 0:
            net = net.to(memory_format=torch.channels_last)
        try:
            MMDistributedDataParallel(net)
        except (ValueError, errors.DistkitError):
            pass
        else:
            raise AssertionError("memory formats that differ across ranks must be refused")
        dist.barrier()
    return worst


def forward_decides_checks():
    """mmengine's gradient accumulation: the forward runs under no_sync
    (OptimWrapper.optim_context) and its backward after the context ends.
    Whether a backward reduces is decided at its forward, as torch's DDP
    does: with find_unused_parameters and a layer used in the unsynchronized
    micro-step only on even ranks, 4 steps equal torch DDP's. Before, that
    backward reduced (the decision was taken at backward), averaging the
    micro-step's gradients early and losing the even ranks' part."""
    worst = 0.0
    results = []
    for wrap in (distkit_wrap, torch_wrap):
        net = make("unused_no_sync")
        model = wrap(net, "unused_no_sync")
        sgd = torch.optim.SGD(net.parameters(), lr=0.1)
        for step in range(4):
            sgd.zero_grad()
            with model.no_sync():
                net.in_no_sync = True
                loss = F.mse_loss(model(inp(step, 1)), target(step, 1))
                net.in_no_sync = False
            loss.backward()  # outside the context: still not reduced
            F.mse_loss(model(inp(step, 0)), target(step, 0)).backward()
            sgd.step()
        results.append({k.replace(".module", ""): v.detach().clone()
                        for k, v in net.named_parameters()})
    for name, want in results[1].items():
        rel = relative_difference(results[0][name], want)
        worst = max(worst, rel)
        assert rel <= 1e-6, f"forward decides: {name}: relative difference {rel:.3g} > 1e-6"
    return worst


def main():
    store = f"file://{os.environ.get('TEST_TMPDIR', '/tmp')}/torch_store_{os.environ['MASTER_PORT']}"
    tdist.init_process_group("gloo", init_method=store,
                             rank=RANK, world_size=int(os.environ["WORLD_SIZE"]))
    dist.init_dist("pytorch", backend="gloo")
    torch.set_num_threads(1)
    worst = 0.0
    for mode in MODES:
        ours = train(mode, distkit_wrap)
        ref = train(mode, torch_wrap)
        w = compare(mode, ours, ref)
        worst = max(worst, w) if mode != "fp16" else worst
    train_step_checks()
    failing_worst, failing_torch = backward_raises_checks()
    # A parameter without gradient is an error naming it (no hang).
    net = make("find_unused")
    model = MMDistributedDataParallel(net)
    try:
        F.mse_loss(model(inp(0, 0)), target(0, 0)).backward()
    except Exception as e:  # raised from the reducer's end-of-backward callback
        assert "never.weight" in str(e) or "params[" in str(e), str(e)
    else:
        raise AssertionError("unused parameters without find_unused_parameters must fail")
    device_placement_checks()
    channels_last_worst = channels_last_checks()
    forward_decides_worst = forward_decides_checks()
    dist.barrier()
    print(f"rank {RANK}: distkit.model equals torch DDP in every mode "
          f"(worst relative difference {worst:.2g}); train_step checks passed; a raising "
          f"backward taken again equals training without it (worst {failing_worst:.2g}; "
          f"torch DDP: {failing_torch:.2g}); channels_last equals torch DDP (worst "
          f"{channels_last_worst:.2g}); a forward under no_sync decides its backward (worst "
          f"{forward_decides_worst:.2g})")
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
