"""specrace's simulator: when does vLLM's async spec-decode pipeline hand GDN a wrong count?

The subpackages read as the pipeline, left to right; each may import only from those before it:

- :mod:`sim.model`: scenario -> workload -> scheduler and InputBatch -> schedule -> SimPy timing
  -> per-read verdicts (:mod:`sim.model.verdict`, the one oracle). The model itself; imports
  nothing else of specrace.
- :mod:`sim.runs`: one run's directory on disk (atomic writes, Parquet, meta.json).
- :mod:`sim.explore`: sweeps, swarms, rates, plots, Perfetto, timelines, the bounded check,
  benchmarks over many runs.
- :mod:`sim.hardware`: the model held to hardware observations (``gpu_check`` replays).
- :mod:`sim.resolve`: a user's vLLM configuration -> release facts -> the policy it takes, its
  risk and mitigations.
- :mod:`sim.cli`: the ``python -m sim`` command line over all of the above.

``sim`` never imports torch, triton or ``gpu_check``; ``gpu_check`` builds on
:mod:`sim.model`, :mod:`sim.runs` and :mod:`sim.hardware` (``gpu_check.vllm`` also on
:mod:`sim.resolve`), never on ``sim.explore`` or ``sim.cli`` (tests/project/test_layout.py).
The words are defined in docs/glossary.md.
"""
