"""A small original Terminal-Bench (v1) task folder, as the TB1 repository lays its tasks out."""

from __future__ import annotations

from pathlib import Path


def tb1_task(root: Path, *, compose: bool, name: str = "count-lines") -> Path:
    """Write a TB1 task at ``root/name`` (task.yaml, Dockerfile, solution.sh, run-tests.sh, tests/);
    ``compose`` adds the docker-compose.yaml that most TB1 tasks carry."""
    src = root / name
    (src / "tests").mkdir(parents=True)
    (src / "task.yaml").write_text(
        "instruction: |-\n  Count the lines of /app/input.txt into /app/count.txt.\n"
        "author_name: evokit\nauthor_email: evokit@example.com\ndifficulty: easy\n"
        "category: file-operations\ntags: [wc, bash]\n"
        "max_agent_timeout_sec: 200\nmax_test_timeout_sec: 30\n"
    )
    (src / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY input.txt /app/input.txt\n"
    )
    (src / "input.txt").write_text("a\nb\nc\n")
    (src / "solution.sh").write_text("#!/bin/bash\nwc -l < /app/input.txt > /app/count.txt\n")
    (src / "run-tests.sh").write_text('#!/bin/bash\nbash "$TEST_DIR/check.sh"\n')
    (src / "tests" / "check.sh").write_text('[ "$(cat /app/count.txt)" = 3 ]\n')
    if compose:
        (src / "docker-compose.yaml").write_text(
            "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n"
            "    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n"
            "    environment:\n      - TEST_DIR=${T_BENCH_TEST_DIR}\n"
        )
    return src
