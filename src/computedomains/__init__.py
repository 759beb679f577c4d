"""compute-domains: ComputeDomains (isolated IMEX domains) for multi-node NVLink clusters."""

from importlib import metadata

try:
    __version__ = metadata.version("compute-domains")
except metadata.PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"
