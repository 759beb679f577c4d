"""NVLink fabric discovery: NVML (real or fake), /proc checks and the node verdict."""
