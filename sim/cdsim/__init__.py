"""The simulated cluster: a real control plane as local processes plus simulated GB200 nodes."""
