"""inventory: stock records and their valuation."""
from inventory.core import Item, load, total_value

__all__ = ["Item", "load", "total_value"]
