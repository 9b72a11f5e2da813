"""Registries in mmengine's manner: config files name callables
(auto-wrap policies, parameter initializers) by string, and
MMFullyShardedDataParallel looks them up in ``FUNCTIONS``; model wrappers
are the classes registered in ``MODEL_WRAPPERS`` or its children, which
is how ``distkit.model.is_model_wrapper`` (and mmengine's Runner) tell a
wrapper from a model.

``MODEL_WRAPPERS`` is mmengine's own registry when mmengine can be
imported, so mmengine's wrappers (MMDeepSpeedEngineWrapper,
ColossalAIModelWrapper, ...) and users' own registered wrappers count;
otherwise it is a registry of distkit's own holding, as mmengine's does,
torch's DistributedDataParallel and DataParallel. distkit's wrappers are
registered in its child ``DISTKIT_MODEL_WRAPPERS`` (scope "distkit"), so
their names, which are mmengine's, do not replace mmengine's classes; a
config reaches them as ``type='distkit.MMDistributedDataParallel'``.
``HOOKS`` is mmengine's hook registry (or distkit's own), and distkit's
hooks are in its child ``DISTKIT_HOOKS`` (scope "distkit")."""
from typing import Callable, Dict, Optional

import torch


class Registry:
    """A name -> callable table with mmengine's Registry's interface as far as
    distkit uses it: ``register_module``, ``get`` (looked up in the parents
    too; ``"scope.Name"`` in the child of that scope), ``module_dict``,
    ``children`` (scope -> child registry), ``parent`` and ``scope``."""

    def __init__(self, name: str, parent: Optional["Registry"] = None,
                 scope: Optional[str] = None):
        self.name = name
        self.parent = parent
        self.scope = scope
        self._module_dict: Dict[str, Callable] = {}
        self._children: Dict[str, "Registry"] = {}
        if parent is not None:
            if self.scope in parent.children:
                raise KeyError(f"scope {self.scope} exists in {parent.name} registry")
            parent.children[self.scope] = self

    @property
    def module_dict(self) -> Dict[str, Callable]:
        return self._module_dict

    @property
    def children(self) -> Dict[str, "Registry"]:
        return self._children

    def register_module(self, name: Optional[str] = None, force: bool = False,
                        module: Optional[Callable] = None):
        """``register_module(module=f)``, ``register_module(name='x', module=f)``
        or ``@register_module()`` as a decorator."""

        def add(obj):
            key = name or obj.__name__
            if key in self._module_dict and not force:
                raise KeyError(f"{key} is already registered in {self.name}")
            self._module_dict[key] = obj
            return obj

        return add(module) if module is not None else add

    def get(self, key: str) -> Optional[Callable]:
        scope, _, rest = key.partition(".")
        if rest and scope in self._children and key not in self._module_dict:
            return self._children[scope].get(rest)
        registry = self
        while registry is not None:
            if key in registry._module_dict:
                return registry._module_dict[key]
            registry = registry.parent
        return None

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self._module_dict)


FUNCTIONS = Registry("function")


def _model_wrappers():
    """mmengine's MODEL_WRAPPERS where mmengine can be imported, else
    distkit's own with torch's wrappers registered as mmengine registers
    them. Returns (the registry, the class that makes a child of it)."""
    try:
        from mmengine.registry import MODEL_WRAPPERS as registry
        from mmengine.registry import Registry as kind
    except ImportError:
        registry, kind = Registry("model_wrapper"), Registry
        registry.register_module(module=torch.nn.DataParallel)
        if torch.distributed.is_available():
            registry.register_module(module=torch.nn.parallel.DistributedDataParallel)
    return registry, kind


def _hooks():
    """mmengine's HOOKS where mmengine can be imported, else distkit's own."""
    try:
        from mmengine.registry import HOOKS as registry
    except ImportError:
        registry = Registry("hook")
    return registry


def _child(parent, kind, scope: str, name: str):
    """``parent``'s child registry of ``scope`` (made when missing)."""
    existing = parent.children.get(scope)
    return existing if existing is not None else kind(name, parent=parent, scope=scope)


MODEL_WRAPPERS, _REGISTRY_KIND = _model_wrappers()
DISTKIT_MODEL_WRAPPERS = _child(MODEL_WRAPPERS, _REGISTRY_KIND, "distkit", "model_wrapper")
# distkit's mmengine hooks (distkit.hooks), reached from a config as
# ``dict(type='distkit.FSDPCheckpointHook')``.
HOOKS = _hooks()
DISTKIT_HOOKS = _child(HOOKS, _REGISTRY_KIND, "distkit", "hook")
