"""A pytest plugin for the nbval subprocess of ``test_quickstart_nbval`` (``-p nbval_sockets``): its
kernels talk over Unix sockets in a private folder, as ``scripts/run_notebooks.py``'s kernels do.

nbval builds its ``KernelManager`` with no configuration hook, so a TCP kernel there picks free
ports and releases them before binding, and can lose one to a process started beside it ("Address
already in use"). The plugin swaps in a manager whose transport is ``ipc``; what the test checks,
that the stored notebook runs cell by cell, does not depend on the transport."""

from __future__ import annotations

import atexit
import shutil
import tempfile

import nbval.kernel
from jupyter_client.manager import KernelManager
from script_support import load_script

#: The socket settings every notebook kernel uses, from the one place that defines them.
kernel_config = load_script("run_notebooks").kernel_config


class SocketKernelManager(KernelManager):
    """A kernel manager on :func:`kernel_config`'s sockets in a temporary folder, removed when the
    process exits."""

    def __init__(self, **kwargs):
        folder = tempfile.mkdtemp(prefix="evokit-kernel-")
        atexit.register(shutil.rmtree, folder, True)
        super().__init__(config=kernel_config(folder), **kwargs)


def pytest_configure(config) -> None:
    """Swap the manager nbval starts its kernels with (nbval imports ``KernelManager`` by name)."""
    nbval.kernel.KernelManager = SocketKernelManager
