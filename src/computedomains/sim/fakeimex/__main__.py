"""``python -m computedomains.sim.fakeimex (daemon|ctl) ARGS``: what the installed scripts run."""

import sys

if len(sys.argv) < 2 or sys.argv[1] not in ("daemon", "ctl"):
    print("usage: python -m computedomains.sim.fakeimex (daemon|ctl) [ARGS]", file=sys.stderr)
    sys.exit(2)
if sys.argv[1] == "daemon":
    from computedomains.sim.fakeimex import daemon

    sys.exit(daemon.main(sys.argv[2:]))
from computedomains.sim.fakeimex import ctl

sys.exit(ctl.main(sys.argv[2:]))
