"""Checks for python-package-bugfix: the package's API and the shipped CLI on known and unseen data.

The package is the agent's work, so it never runs inside the verifier: the API and the CLI run in
subprocesses as nobody, from /tmp, with the package on their PYTHONPATH only.
"""
import subprocess

AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": "/app/src", "PYTHONDONTWRITEBYTECODE": "1"}
API = """
from decimal import Decimal
from inventory import Item, total_value
items = [Item("x", 4, Decimal("1.25")), Item("y", -1, Decimal("3")), Item("z", 0, Decimal("9"))]
print(total_value(items), total_value(items, skip_negative=False))
"""


def as_nobody(*argv):
    return subprocess.run([*AS_NOBODY, *argv], capture_output=True, text=True, env=ENV, cwd="/tmp",
                          timeout=30).stdout


def test_cli_on_the_shipped_data():
    assert as_nobody("/app/bin/inventory-cli", "/app/data/stock.csv").strip() == "117.40"


def test_api_unseen_data():
    assert as_nobody("python3", "-c", API).split() == ["5.00", "2.00"]


def test_cli_unchanged():
    assert open("/app/bin/inventory-cli").read() == open("/tests/inventory-cli.orig").read()
