import faulthandler
import signal
import sys

from cdsim import commands

# `kill -USR1 <pid>` prints every thread's stack to stderr: a cdsim that hangs says where.
faulthandler.register(signal.SIGUSR1, all_threads=True)
sys.exit(commands.main())
