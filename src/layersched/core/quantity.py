"""Kubernetes resource quantities ("500m", "2", "4Gi", "1G"): pods' requests and nodes'
allocatable, as ``layersched estimate`` weighs them and the testbed's driver sizes
whole-node pods."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from layersched.core.errors import InputError

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]{0,2})$")


def parse_quantity(text: str, where: str) -> Decimal:
    """The value of a quantity string; ``where`` names the field in errors."""
    match = _QUANTITY.match(text.strip())
    if not match or match.group(2) not in _SUFFIX:
        raise InputError(
            f"{where}: {text!r} is not a Kubernetes quantity (e.g. '500m', '2', '4Gi')"
        )
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        raise InputError(f"{where}: {text!r} is not a number") from None
    except ArithmeticError:  # decimal.Overflow: an exponent past Decimal's (1e999999999)
        raise InputError(f"{where}: {text!r} is out of range") from None
