"""A driver root holding the fake ``libnvidia-ml.so.1``, whose answers a test sets.

``pynvml`` keeps one library per process, so the tests of one process share one such driver
root and change what its NVML answers by replacing the topology file beside the library, which
the library reads again at every init (as a simulated node's re-check sees a changed fabric).
"""

from __future__ import annotations

import dataclasses
import pathlib

from cdsim import fakenvml, tools
from computedomains.fabric import nvml


def built_library() -> pathlib.Path:
    """The fake library of the current source, built into the tools' cache when missing."""
    return tools.ToolBox.from_env().nvml_library()


@dataclasses.dataclass(frozen=True)
class NvmlNode:
    """A driver root with the fake library (and nothing else of a node)."""

    driver_root: pathlib.Path

    @property
    def library(self) -> pathlib.Path:
        """Its ``libnvidia-ml.so.1``, where a driver installs it."""
        return self.driver_root / fakenvml.library_dir() / fakenvml.LIBRARY

    @property
    def topology(self) -> pathlib.Path:
        """The topology file the library answers from."""
        return self.driver_root / fakenvml.library_dir() / fakenvml.TOPOLOGY_FILE

    def answer(self, model: fakenvml.Answers) -> None:
        """Answer as ``model`` says from the next init on."""
        fakenvml.write_topology(self.topology, model)

    def backend(self, proc_root: pathlib.Path) -> nvml.NvmlBackend:
        """The production backend over this driver root."""
        return nvml.NvmlBackend(driver_root=self.driver_root, proc_root=proc_root)


def make(driver_root: pathlib.Path, library: pathlib.Path) -> NvmlNode:
    """Install ``library`` (a built fake) into ``driver_root``; it answers nothing until told."""
    fakenvml.install(library, driver_root / fakenvml.library_dir())
    return NvmlNode(driver_root)
