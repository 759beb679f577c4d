"""What a component imports before it serves: run in a fresh interpreter, report as JSON.

``python -m tests.support.startup <command> [args...]`` builds the CLI's parser for the
command line, then imports the module the subcommand runs, exactly as the console script
would just before serving, and prints the modules loaded and the peak RSS.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys


def _run_modules() -> dict[str, str]:
    """The module each command imports to run."""
    from computedomains import cli  # noqa: PLC0415 - measured from main's import on

    return {c.name: c.runs for c in cli.COMPONENTS} | {"node-init": "computedomains.nodeinit.run"}


def main(argv: list[str]) -> None:
    """Parse ``argv`` as the console script does, import the run module, report."""
    from computedomains import cli  # noqa: PLC0415 - measured from here on

    cli.build_parser(argv).parse_args(argv)
    importlib.import_module(_run_modules()[argv[0]])
    modules = sorted(sys.modules)
    print(
        json.dumps(
            {
                "modules": len(modules),
                "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "sim": [m for m in modules if m.startswith("cdsim")],
                "cryptography": [m for m in modules if m.startswith("cryptography")],
                "kubernetes": [m for m in modules if m.split(".")[0] == "kubernetes"],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
