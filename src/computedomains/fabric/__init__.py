"""NVLink fabric discovery: NVML, /proc checks and the node verdict."""
