import sys

from cdsim import commands

sys.exit(commands.main())
