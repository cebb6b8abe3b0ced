"""One run on disk: atomic writes (``io``) and the run directory (``run``: schedule.json,
reads.parquet, trace.parquet, meta.json). Imports :mod:`sim.model`; nothing from exploration,
hardware comparison or the command line.
"""
