"""The two call forms several functions have: the seeds' (torch.distributed's
shapes, e.g. ``all_gather(tensor_list, tensor)``) and mmengine's (e.g.
``all_gather(data)`` returning a list). Each function tells them apart by
argument types; a call that fits both with different meanings raises
TypeError naming both (the README's compatibility table lists them)."""
import inspect
from typing import Callable, Optional, Tuple


class Form:
    """One call form: its text (for errors) and its parameters, given as a
    function with that signature (only the signature is read)."""

    def __init__(self, text: str, parameters: Callable):
        self.text = text
        self.signature = inspect.signature(parameters)

    def bind(self, name: str, args: tuple, kwargs: dict, other: "Form") -> dict:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}: {e} (the forms are {self.text} and {other.text})") from None
        bound.apply_defaults()
        return dict(bound.arguments)


def choose(name: str, seed: Form, library: Form, args: tuple, kwargs: dict,
           use_seed: Optional[bool]) -> Tuple[bool, dict]:
    """(whether the seed form is used, its arguments by name). ``use_seed``
    None: the call fits both forms with different meanings."""
    if use_seed is None:
        raise TypeError(f"{name}: ambiguous call; write the seed's form {seed.text} or "
                        f"mmengine's {library.text} with keyword arguments")
    form, other = (seed, library) if use_seed else (library, seed)
    return use_seed, form.bind(name, args, kwargs, other)
