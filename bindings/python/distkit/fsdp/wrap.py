"""Which modules become units: torch's auto-wrap policies (torch's call
convention), the unit modules a policy picks, and the parameters each unit
takes."""
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple, Type

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


def layout(root: nn.Module, units: List[nn.Module], ignored: Set[nn.Module],
           claimed: Set[int]) -> List[Tuple[List[tuple], List[tuple]]]:
    """For each of `units` (units_of's order), (owned, aliases): owned, the
    (owner, name, parameter) it holds, each parameter once, at its first
    place in module order; aliases, (owner, name, i) for every further place
    of owned[i] (tied weights: one Parameter on two modules; the unit puts
    the same full view and leaf there, so every use computes with one
    tensor and autograd sums their gradients). A parameter goes to the
    innermost unit on every path from `root` to every module it is
    registered on: used in one place, the innermost unit above it; shared
    (an embedding tied to the output projection, a module registered under
    two names), the innermost unit enclosing all its uses (their lowest
    common ancestor among the units), which is gathered whenever any of
    them computes. (Held by the unit of its first use instead, it could be
    freed while another unit computes with it.) Parameters in `claimed` (by
    id) and places on `ignored` modules are left alone.

    One walk of the module tree, every path (a module registered twice is
    walked under each name), constant time a step but at a parameter's
    further places (their units met as sets): linear in the number of
    modules. (Before, each unit walked its own subtree again: quadratic in
    the nesting depth, and a second walk of the whole model per unit for
    the module's state-dict hooks.)"""
    order = {id(m): i for i, m in enumerate(units)}  # a module listed twice: its last
    first = {}
    for i, m in enumerate(units):
        first.setdefault(id(m), i)  # where the unit's parameters go

    class Chain:
        """The units above a module: innermost first (`units[index]`),
        `best` the innermost of them all (least in `order`)."""
        __slots__ = ("index", "parent", "best")

        def __init__(self, index, parent):
            self.index, self.parent = index, parent
            self.best = index if parent is None else min(index, parent.best)

        def members(self) -> Set[int]:
            out, node = set(), self
            while node is not None:
                out.add(node.index)
                node = node.parent
            return out

    # id(parameter) -> the Chain of its one place so far, or the set of
    # units (order values) above every place once it has several.
    above_all: Dict[int, object] = {}
    places: List[tuple] = []  # (owner, name, parameter), first places in module order
    seen_places: Set[tuple] = set()
    stack = [(root, None)]
    while stack:  # pre-order, children in registration order, every path
        module, above = stack.pop()
        if module in ignored:
            continue
        if id(module) in order:
            above = Chain(order[id(module)], above)
        for name, p in module._parameters.items():
            if p is None or id(p) in claimed:
                continue
            before = above_all.get(id(p), above)
            if before is not above:  # a further place: the units above both
                mine = above.members() if above is not None else set()
                above_all[id(p)] = mine & (before.members() if isinstance(before, Chain)
                                           else before if before is not None else set())
            else:
                above_all[id(p)] = above
            if (id(module), name) not in seen_places:
                seen_places.add((id(module), name))
                places.append((module, name, p))
        stack.extend((child, above) for child in reversed(list(module._modules.values()))
                     if child is not None)
    out: List[Tuple[List[tuple], List[tuple]]] = [([], []) for _ in units]
    index: Dict[int, int] = {}  # id(parameter) -> its place in its unit's owned
    for owner, name, p in places:
        common = above_all[id(p)]
        if isinstance(common, Chain):
            innermost = common.best
        elif common:
            innermost = min(common)
        else:
            continue  # no unit encloses every use
        owned, aliases = out[first[id(units[innermost])]]
        if id(p) in index:
            aliases.append((owner, name, index[id(p)]))
        else:
            index[id(p)] = len(owned)
            owned.append((owner, name, p))
    return out


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
