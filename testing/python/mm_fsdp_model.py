"""The small model the FSDP tests under mmengine's interface train
(data_preprocessor, forward(mode=...)): an embedding, two residual blocks
(one FSDP unit each when wrapped by block) and a head."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, x):
        return torch.tanh(self.linear(x)) + x


class Net(nn.Module):
    """mmengine's model interface: data_preprocessor, forward(mode=...)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 6)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(6, 2)

    def data_preprocessor(self, data, training=False):
        return data

    def forward(self, inputs, targets=None, mode="tensor"):
        out = self.head(self.blocks(self.embed(inputs)))
        if mode == "loss":
            return {"loss": ((out - targets) ** 2).mean()}
        if mode == "predict":
            return list(out)
        return out
