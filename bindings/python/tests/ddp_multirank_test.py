"""distkit.model against torch.nn.parallel.DistributedDataParallel (Gloo), in
every rank of a real job: after 5 SGD steps on the same model, data and seed,
every parameter and buffer must match within 1e-6 relative (to each tensor's
largest magnitude; 1e-3 with the fp16 hook) in every mode, and mmengine's
train_step / val_step / test_step and is_model_wrapper behave as mmengine's.
torch.distributed rendezvouses through a FileStore in the test's temporary directory
(distrun's store has MASTER_PORT, and no other port is sure to be free)."""
import os

import torch
import torch.distributed as tdist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from distkit import dist
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
    dist.barrier()
    print(f"rank {RANK}: distkit.model equals torch DDP in every mode "
          f"(worst relative difference {worst:.2g}); train_step checks passed")
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
