"""Which modules become units: torch's auto-wrap policies (torch's call
convention), the unit modules a policy picks, and the parameters each unit
takes."""
from typing import Callable, Dict, Iterable, List, Optional, Set, Type

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


def holders(root: nn.Module, units: List[nn.Module],
            ignored: Set[nn.Module]) -> Dict[int, nn.Module]:
    """id(parameter) -> the unit module that holds it: the innermost unit on
    every path from `root` to every module the parameter is registered on.
    A parameter used in one place goes to the innermost unit above it; a
    shared one (an embedding tied to the output projection, a module
    registered under two names) to the unit enclosing all its uses, which is
    gathered whenever any of them computes. (Held by the unit of its first
    use instead, it could be freed while another unit computes with it.)"""
    order = {id(m): i for i, m in enumerate(units)}
    common: Dict[int, frozenset] = {}

    def walk(module: nn.Module, above: frozenset) -> None:  # every path, not deduplicated
        if module in ignored:
            return
        if id(module) in order:
            above = above | {id(module)}
        for p in module._parameters.values():
            if p is not None:
                common[id(p)] = common[id(p)] & above if id(p) in common else above
        for child in module._modules.values():
            if child is not None:
                walk(child, above)

    walk(root, frozenset())
    by_id = {id(m): m for m in units}
    return {p: by_id[min(ids, key=order.get)] for p, ids in common.items() if ids}


def unclaimed_params(module: nn.Module, ignored: Set[nn.Module], claimed: Set[int],
                     holder: Optional[Dict[int, nn.Module]] = None) -> List[tuple]:
    """(owner, name, parameter) under `module` that no unit holds yet, each
    parameter once, at the first place it is registered; with `holder`
    (holders()), only those `module` holds."""
    owned = []
    for sub in module.modules():
        if sub in ignored:
            continue
        for name, p in list(sub._parameters.items()):
            if p is None or id(p) in claimed:
                continue
            if holder is not None and holder.get(id(p)) is not module:
                continue
            claimed.add(id(p))
            owned.append((sub, name, p))
    return owned


def other_places(module: nn.Module, ignored: Set[nn.Module], owned: List[tuple]) -> List[tuple]:
    """(owner, name, i): the further places under `module` where owned[i]'s
    parameter is registered too (tied weights: one Parameter on two
    modules). The unit puts the same full view and leaf there, so both uses
    compute with one tensor and autograd sums their gradients."""
    index = {id(p): i for i, (_, _, p) in enumerate(owned)}
    first = {(id(owner), name) for owner, name, _ in owned}
    out = []
    for sub in module.modules():
        if sub in ignored:
            continue
        for name, p in sub._parameters.items():
            if p is not None and id(p) in index and (id(sub), name) not in first:
                out.append((sub, name, index[id(p)]))
    return out
