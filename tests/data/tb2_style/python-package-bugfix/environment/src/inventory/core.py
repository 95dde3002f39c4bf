"""Loading stock records and valuing them."""
import csv
from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Item:
    sku: str
    quantity: int
    unit_price: Decimal


def load(path):
    with open(path, newline="") as f:
        return [Item(r["sku"], int(r["quantity"]), Decimal(r["unit_price"])) for r in csv.DictReader(f)]


def total_value(items, *, skip_negative=True):
    """Sum of quantity x unit price; rows with a negative quantity (returns) are skipped by default."""
    total = Decimal("0")
    for item in items:
        if skip_negative and item.quantity < 0:
            continue
        total += item.unit_price
    return total.quantize(Decimal("0.01"))
