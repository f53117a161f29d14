"""Every error the extender raises on purpose is defined in ``extender/errors.py``, under one root."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from extender import errors

PACKAGE = Path(errors.__file__).resolve().parent


def _exception_classes_outside_errors() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(base, ast.Name) and (base.id.endswith(("Error", "Exception")))
                    for base in node.bases):
                found.append(f"{path.relative_to(PACKAGE.parent)}: {node.name}")
    return found


def test_no_module_but_errors_defines_an_exception() -> None:
    assert _exception_classes_outside_errors() == []


def test_every_error_has_the_one_root_and_input_errors_are_value_errors() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert len(classes) >= 20
    for cls in classes:
        assert issubclass(cls, errors.ExtenderError), cls
        assert cls.__doc__, cls
    for cls in (errors.ProtocolError, errors.ConfigError, errors.SnapshotError, errors.RecordError,
                errors.GroupError, errors.QuantityError):
        assert issubclass(cls, errors.BadInputError) and issubclass(cls, ValueError), cls
    for cls in (errors.KubeError, errors.GoneError, errors.BindError, errors.IntentsFullError, errors.FencedError,
                errors.EvictionError, errors.BudgetError):
        assert issubclass(cls, errors.EdgeError), cls
