"""Checks for python-package-bugfix: the package's API and the shipped CLI on known and unseen data."""
import subprocess
import sys
from decimal import Decimal

sys.path.insert(0, "/app/src")

from inventory import Item, total_value  # noqa: E402


def test_cli_on_the_shipped_data():
    out = subprocess.run(["/app/bin/inventory-cli", "/app/data/stock.csv"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    assert out.strip() == "117.40"


def test_api_unseen_data():
    items = [Item("x", 4, Decimal("1.25")), Item("y", -1, Decimal("3")), Item("z", 0, Decimal("9"))]
    assert total_value(items) == Decimal("5.00")
    assert total_value(items, skip_negative=False) == Decimal("2.00")


def test_cli_unchanged():
    assert open("/app/bin/inventory-cli").read() == open("/tests/inventory-cli.orig").read()
