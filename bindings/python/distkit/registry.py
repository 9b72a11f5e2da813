"""A small registry in mmengine's manner (``FUNCTIONS``): config files name
callables (auto-wrap policies, parameter initializers) by string, and
MMFullyShardedDataParallel looks them up here."""
from typing import Callable, Dict, Optional


class Registry:
    def __init__(self, name: str):
        self.name = name
        self.module_dict: Dict[str, Callable] = {}

    def register_module(self, name: Optional[str] = None, module: Optional[Callable] = None,
                        force: bool = False):
        """``register_module(module=f)``, ``register_module(name='x', module=f)``
        or ``@register_module()`` as a decorator."""

        def add(obj):
            key = name or obj.__name__
            if key in self.module_dict and not force:
                raise KeyError(f"{key} is already registered in {self.name}")
            self.module_dict[key] = obj
            return obj

        return add(module) if module is not None else add

    def get(self, key: str) -> Optional[Callable]:
        return self.module_dict.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.module_dict


FUNCTIONS = Registry("function")
