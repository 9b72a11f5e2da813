"""Which modules become units: torch's auto-wrap policies (torch's call
convention), the unit modules a policy picks, and the parameters each unit
takes."""
from typing import Callable, Iterable, List, Optional, Set, Type

from torch import nn


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, nonwrapped_numel: int,
                                min_num_params: int = int(1e8)) -> bool:
    """Wraps a module whose not-yet-wrapped parameters number at least
    ``min_num_params``."""
    return True if recurse else nonwrapped_numel >= min_num_params


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, nonwrapped_numel: int,
                                 transformer_layer_cls: Set[Type[nn.Module]]) -> bool:
    """Wraps every module of the given (layer) types."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


class ModuleWrapPolicy:
    """Wraps every module whose type is in ``module_classes``."""

    def __init__(self, module_classes: Iterable[Type[nn.Module]]):
        self._classes = tuple(module_classes)

    def __call__(self, module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        return True if recurse else isinstance(module, self._classes)


def units_of(root: nn.Module, policy: Optional[Callable],
             ignored: Set[nn.Module]) -> List[nn.Module]:
    """The modules that become units, children before parents, root last."""
    units: List[nn.Module] = []

    def visit(module: nn.Module) -> int:
        """Returns the number of parameters under `module` not yet wrapped."""
        if module in ignored:
            return 0
        remaining = sum(p.numel() for p in module.parameters(recurse=False))
        for child in module.children():
            if policy is None or policy(module=child, recurse=True, nonwrapped_numel=0):
                remaining += visit(child)
            else:
                remaining += sum(p.numel() for p in child.parameters())
        if module is not root and policy is not None and remaining > 0 and policy(
                module=module, recurse=False, nonwrapped_numel=remaining):
            units.append(module)
            return 0
        return remaining

    visit(root)
    units.append(root)
    return units


def unclaimed_params(module: nn.Module, ignored: Set[nn.Module],
                     claimed: Set[int]) -> List[tuple]:
    """(owner, name, parameter) under `module` that no unit holds yet."""
    owned = []
    for sub in module.modules():
        if sub in ignored:
            continue
        for name, p in list(sub._parameters.items()):
            if p is None or id(p) in claimed:
                continue
            claimed.add(id(p))
            owned.append((sub, name, p))
    return owned
