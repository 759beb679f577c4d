"""Stand-ins for ``nvidia-imex`` and ``nvidia-imex-ctl`` on simulated nodes.

The fake daemon reads the real configuration (``imexd.cfg`` and ``nodes.cfg``), binds the
real ports on the loopback pod IP it is given, resolves peer names through a hosts file and
really connects to every peer with a loopback address, so an IMEX domain forms and breaks in
the simulated cluster as it would on a rack. ``nvidia-imex-ctl`` asks it over the command
port. Faults are injected through an environment variable or a ``fail`` file next to the
config (see :mod:`cdsim.fakeimex.config`). Only the standard library is used:
both programs start often and must start fast.
"""
