"""extender.model.quantity: quantity strings -> exact Decimals -> the integer units kube-scheduler compares."""

from __future__ import annotations

from decimal import Decimal

import pytest

from extender.errors import QuantityError
from extender.model.quantity import add_into, describe, parse_quantity, parse_resources, to_units

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Decimal("0.1")),
        ("1", Decimal(1)),
        ("0.5", Decimal("0.5")),
        ("1Gi", Decimal(GI)),
        ("1.5Gi", Decimal(GI + GI // 2)),
        ("2e3", Decimal(2000)),
        ("2E3", Decimal(2000)),
        ("1e-3", Decimal("0.001")),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1G", Decimal(10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),  # decimal SI "exa", not an exponent
        ("1Ki", Decimal(1024)),
        ("1Mi", Decimal(MI)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("8Ei", Decimal(2**63)),
        ("9e29", Decimal("9e29")),
        ("250n", Decimal("0.00000025")),
        ("3u", Decimal("0.000003")),
        (".5", Decimal("0.5")),
        ("+2", Decimal(2)),
        (" 2 ", Decimal(2)),
        (0, Decimal(0)),
        (7, Decimal(7)),
        (1.5, Decimal("1.5")),
    ],
)
def test_parse_quantity(text: object, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("cpu", "100m", 100),
        ("cpu", "1", 1000),
        ("cpu", "0.5", 500),
        ("cpu", "2e3", 2_000_000),
        ("cpu", "1k", 1_000_000),
        ("cpu", 2, 2000),
        ("cpu", "0.1m", 1),       # rounded up, never down to zero
        ("cpu", "1500u", 2),
        ("memory", "1Gi", GI),
        ("memory", "1.5Gi", GI + GI // 2),
        ("memory", "1M", 10**6),
        ("memory", "1k", 1000),
        ("memory", "100m", 1),     # 0.1 byte rounds up to a whole byte
        ("memory", "0.5", 1),
        ("memory", "2e3", 2000),
        ("memory", 3, 3),
        ("nvidia.com/gpu", "1", 1),
        ("pods", 110, 110),
    ],
)
def test_to_units(name: str, text: object, expected: int) -> None:
    value = to_units(name, text)
    assert value == expected
    assert type(value) is int


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "invalid quantity 'abc'"),
        ("1Zi", "invalid quantity '1Zi'"),
        ("1e", "invalid quantity '1e'"),
        ("", "invalid quantity ''"),
        ("Gi", "invalid quantity 'Gi'"),
        ("1 Gi", "invalid quantity '1 Gi'"),
        ("1..2", "invalid quantity '1..2'"),
        ("1.2.3", "invalid quantity '1.2.3'"),
        ("--1", "invalid quantity '--1'"),
        ("1e3Gi", "invalid quantity '1e3Gi'"),
        ("1mm", "invalid quantity '1mm'"),
        ("1e999999999", "invalid quantity '1e999999999'"),  # decimal overflow, not a crash
        ("1e999999", "invalid quantity '1e999999': out of range"),  # would take seconds to make an int
        ("1e30", "invalid quantity '1e30': out of range"),
        (1e30, "invalid quantity 1e+30: out of range"),  # numbers too (found by schemathesis)
        (-1.7976931348623157e308, "invalid quantity -1.7976931348623157e+308: out of range"),
        (10**30, f"invalid quantity {10**30}: out of range"),
        ("-1e30", "invalid quantity '-1e30': out of range"),
        (None, "invalid quantity None"),
        (True, "invalid quantity True"),
        (False, "invalid quantity False"),
        (float("nan"), "invalid quantity nan"),
        (float("inf"), "invalid quantity inf"),
        ([1], "invalid quantity [1]"),
        ({"cpu": 1}, "invalid quantity {'cpu': 1}"),
    ],
)
def test_parse_quantity_rejects(text: object, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value) == message
    with pytest.raises(QuantityError):
        to_units("cpu", text)


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, {}),
        ({}, {}),
        ({"cpu": "100m", "memory": "1Gi"}, {"cpu": 100, "memory": GI}),
        ({"cpu": 2, "memory": "1.5Gi", "nvidia.com/gpu": "1"}, {"cpu": 2000, "memory": GI + GI // 2,
                                                               "nvidia.com/gpu": 1}),
        ({"cpu": "0"}, {"cpu": 0}),
        ({"ephemeral-storage": "1M", "pods": "110"}, {"ephemeral-storage": 10**6, "pods": 110}),
    ],
)
def test_parse_resources(raw: object, expected: dict[str, int]) -> None:
    assert parse_resources(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"cpu": "abc"}, "invalid quantity 'abc'"),
        ({"cpu": "1", "memory": None}, "invalid quantity None"),
        ({"cpu": [None]}, "invalid quantity [None]"),
        ({"cpu": True}, "invalid quantity True"),
        ({"memory": float("nan")}, "invalid quantity nan"),
        ({"memory": "1Zi"}, "invalid quantity '1Zi'"),
        (["cpu"], "resource list must be a mapping, got list"),
        ([None], "resource list must be a mapping, got list"),
        ("1Gi", "resource list must be a mapping, got str"),
        (5, "resource list must be a mapping, got int"),
    ],
)
def test_parse_resources_rejects(raw: object, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_resources(raw)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("total", "extra", "sign", "expected"),
    [
        ({}, {"cpu": 100}, 1, {"cpu": 100}),
        ({"cpu": 100}, {"cpu": 100, "memory": 5}, 1, {"cpu": 200, "memory": 5}),
        ({"cpu": 100, "memory": 5}, {"cpu": 100}, -1, {"memory": 5}),  # zeros are dropped
        ({"cpu": 100}, {"cpu": 300}, -1, {"cpu": -200}),
    ],
)
def test_add_into(total: dict[str, int], extra: dict[str, int], sign: int, expected: dict[str, int]) -> None:
    add_into(total, extra, sign)
    assert total == expected


@pytest.mark.parametrize(
    ("resources", "text"),
    [
        ({}, "nothing"),
        ({"cpu": 1500}, "cpu=1500m"),
        ({"cpu": 2000}, "cpu=2"),
        ({"cpu": 0}, "cpu=0"),
        ({"memory": 2 * GI}, "memory=2Gi"),
        ({"memory": 3 * MI}, "memory=3Mi"),
        ({"memory": GI + MI}, "memory=1025Mi"),
        ({"memory": 1000}, "memory=1000"),
        ({"memory": 0}, "memory=0"),
        ({"pods": 1, "cpu": 250, "memory": 4 * GI, "nvidia.com/gpu": 2},
         "cpu=250m, memory=4Gi, nvidia.com/gpu=2, pods=1"),
    ],
)
def test_describe(resources: dict[str, int], text: str) -> None:
    assert describe(resources) == text
