"""specrace's simulator: when does vLLM's async spec-decode pipeline hand GDN a wrong count?

The subpackages read as the pipeline, left to right; each may import only from those before it:

- :mod:`sim.model`: scenario -> workload -> scheduler and InputBatch -> schedule -> SimPy timing
  -> per-read verdicts. The model itself; imports nothing else of specrace.
- :mod:`sim.runs`: one run's directory on disk (atomic writes, Parquet, meta.json).
- :mod:`sim.explore`: sweeps, swarms, rates, plots, Perfetto, benchmarks over many runs.
- :mod:`sim.hardware`: the model held to hardware observations (``gpu_check`` replays).
- :mod:`sim.cli`: the ``python -m sim`` command line over all of the above.

``sim`` never imports torch, triton or ``gpu_check``.
"""
