"""Kubernetes resource quantities as integers (pure).

Owns: parsing quantity strings ("500m", "1.5Gi", "2e3") and resource lists into ``dict[str, int]``
in the units kube-scheduler compares: millicores for ``cpu``, whole units (rounded up) for everything
else. Must not: know about pods, nodes or the wire format.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from decimal import Decimal, DecimalException

from extender.errors import QuantityError

Resources = dict[str, int]
"""Resource name -> amount (millicores for cpu, base units rounded up otherwise)."""

CPU = "cpu"
PODS = "pods"

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_MAX_MAGNITUDE = Decimal("1e30")  # far beyond int64 (~9.2e18), where kube-scheduler stops
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[a-zA-Z]{0,2})$")


def parse_quantity(text: object) -> Decimal:
    """Parse a Kubernetes quantity ("100m", "1Gi", 2) into an exact Decimal."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int | float):
        if isinstance(text, float) and not math.isfinite(text):
            raise QuantityError(f"invalid quantity {text!r}")
        value = Decimal(text) if isinstance(text, int) else Decimal(str(text))
        if abs(value) >= _MAX_MAGNITUDE:  # the same range as strings (JSON numbers reach 1.8e308)
            raise QuantityError(f"invalid quantity {text!r}: out of range")
        return value
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}")
    match = _QUANTITY.match(text.strip())
    if not match:
        raise QuantityError(f"invalid quantity {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
        if suffix not in _SUFFIX and suffix[:1] in ("e", "E"):  # "1E"/"1Ei" are exa/exbi, "1E3" is 1000
            value *= Decimal(10) ** int(suffix[1:])
        else:
            value *= _SUFFIX[suffix]
    except (DecimalException, KeyError, ValueError):  # DecimalException: InvalidOperation, Overflow
        raise QuantityError(f"invalid quantity {text!r}") from None
    if abs(value) >= _MAX_MAGNITUDE:  # "1e999999" would take seconds to turn into an int
        raise QuantityError(f"invalid quantity {text!r}: out of range")
    return value


def to_units(name: str, text: object) -> int:
    """Convert one quantity to the integer unit kube-scheduler compares for resource ``name``."""
    if type(text) is str:  # a cluster repeats a few strings ("4", "32Gi", "500m") on every object
        return _string_units(name == CPU, text)
    value = parse_quantity(text)
    if name == CPU:
        value = value * 1000
    return math.ceil(value)


@functools.lru_cache(maxsize=4096)
def _string_units(milli: bool, text: str) -> int:
    value = parse_quantity(text)
    return math.ceil(value * 1000 if milli else value)


def parse_resources(raw: object) -> Resources:
    """Parse a ``{"cpu": "500m", "memory": "1Gi"}`` mapping; unparsable entries raise QuantityError."""
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise QuantityError(f"resource list must be a mapping, got {type(raw).__name__}")
    return {str(name): to_units(str(name), amount) for name, amount in raw.items()}


def add_into(total: Resources, extra: Mapping[str, int], sign: int = 1) -> None:
    """Add (or with ``sign=-1`` subtract) ``extra`` into ``total`` in place, dropping zeros."""
    for name, amount in extra.items():
        value = total.get(name, 0) + sign * amount
        if value:
            total[name] = value
        else:
            total.pop(name, None)


def describe(resources: Mapping[str, int]) -> str:
    """Human form: ``cpu=1500m, memory=2Gi``; used in messages and explanations."""
    parts = []
    for name in sorted(resources):
        amount = resources[name]
        if name == CPU:
            parts.append(f"cpu={amount}m" if amount % 1000 else f"cpu={amount // 1000}")
        elif amount and amount % 2**30 == 0:
            parts.append(f"{name}={amount // 2**30}Gi")
        elif amount and amount % 2**20 == 0:
            parts.append(f"{name}={amount // 2**20}Mi")
        else:
            parts.append(f"{name}={amount}")
    return ", ".join(parts) or "nothing"
