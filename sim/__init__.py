"""specrace's simulator: scenario -> workload -> schedule -> SimPy timing -> reads."""
