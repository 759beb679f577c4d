"""compute-domains: ComputeDomains (isolated IMEX domains) for multi-node NVLink clusters."""


def version() -> str:
    """The installed distribution's version (looked up on demand: it costs an import)."""
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version("compute-domains")
    except metadata.PackageNotFoundError:  # running from a source tree without installing
        return "0.0.0+unknown"
