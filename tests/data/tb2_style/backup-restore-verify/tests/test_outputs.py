"""Checks for backup-restore-verify: the restored tree, the count, and the image's own checker."""
import subprocess
from pathlib import Path

RESTORE = Path("/app/restore")


def test_checker_accepts_the_restore():
    subprocess.run(["/app/tools/check-restore.sh", "/app/restore"], check=True, timeout=60)


def test_contents():
    assert (RESTORE / "etc" / "app.conf").read_text() == "mode=production\nretries=3\n"
    assert (RESTORE / "data" / "users.csv").read_text().splitlines()[1:] == ["1,ada", "2,linus"]


def test_count():
    files = [p for p in RESTORE.rglob("*") if p.is_file()]
    assert Path("/app/restore.count").read_text() == f"{len(files)}\n" == "3\n"


def test_backup_unchanged():
    out = subprocess.run(["sha256sum", "/app/backups/nightly.tar.gz"], capture_output=True, text=True).stdout
    assert out.split()[0] == Path("/tests/nightly.sha256").read_text().split()[0]
