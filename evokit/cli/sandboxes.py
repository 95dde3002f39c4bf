"""The sandbox group: list and clean the host state local sandboxes leave.
"""

from __future__ import annotations

import typer
from rich.table import Table

from evokit.cli.base import app, console

sandbox_app = typer.Typer(help="list / clean host state of local sandboxes (state dirs, cgroups)\n\n"
                               "Example: evokit sandbox clean")
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("list")
def sandbox_list() -> None:
    """Every sandbox and build step with host state: live (owner running), stale or orphan.

    Example: evokit sandbox list
    """
    from evokit.sandbox import stale

    entries = stale.scan()
    table = Table(title=f"evokit sandboxes in {stale.RUN_DIR}")
    for col in ("id", "status", "owner pid", "state dir", "cgroups", "build dir"):
        table.add_column(col)
    for e in entries:
        table.add_row(e.id, e.status, str(e.pid or "-"), e.state_dir or "-", str(len(e.cgroup_dirs)), e.tmp_dir or "-")
    console.print(table if entries else f"no sandbox state in {stale.RUN_DIR}")


@sandbox_app.command("clean")
def sandbox_clean() -> None:
    """Remove the state of sandboxes whose harness is gone (never a live one).

    Example: evokit sandbox clean
    """
    from evokit.sandbox import stale

    removed = stale.clean()
    for line in removed:
        console.print(f"removed {line}")
    live = sum(e.status == "live" for e in stale.scan())
    console.print(f"{len(removed)} removed; {live} live left alone")
