"""Loading a user's module factory from ``"path/to/module.py:function"``."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import PlannerError


def load_factory(spec: str) -> Callable[[], Any]:
    """The callable named by ``"path/to/module.py:function"``, imported from the file.

    The file's directory is put on ``sys.path`` while the module executes (as ``python file.py``
    would), so it can import its siblings. Raises PlannerError for a malformed spec, a missing
    file, a module that fails to import, or a missing or non-callable attribute.
    """
    valid = "PATH.py:FUNCTION, e.g. examples/gpt_block.py:llama_block"
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name.isidentifier():
        raise PlannerError("factory", f"{spec!r} is not PATH.py:FUNCTION", valid)
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise PlannerError("factory", f"file {str(path)!r} not found", valid)
    if path.suffix != ".py":
        raise PlannerError("factory", f"{str(path)!r} is not a .py file", valid)
    mod_name = f"_planner_trace_{path.stem}_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise PlannerError("factory", f"cannot import {str(path)!r}", valid)
    module = importlib.util.module_from_spec(loader_spec)
    directory = str(path.resolve().parent)
    sys.path.insert(0, directory)
    sys.modules[mod_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(mod_name, None)
        raise PlannerError(
            "factory", f"importing {str(path)!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if directory in sys.path:
            sys.path.remove(directory)
    factory = getattr(module, name, None)
    if factory is None:
        public = sorted(
            k
            for k, v in vars(module).items()
            if callable(v) and not k.startswith("_") and getattr(v, "__module__", "") == mod_name
        )
        raise PlannerError(
            "factory", f"{str(path)!r} has no {name!r}", ", ".join(public) or "no callables"
        )
    if not callable(factory):
        raise PlannerError("factory", f"{name!r} in {str(path)!r} is not callable")
    return factory
