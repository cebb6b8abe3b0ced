"""The model: everything that decides *what* happens and *when*, for one scenario and seed.

params (validated scenario) -> workload (every random draw, up front) -> input_batch,
scheduler_rules (what vLLM decides for one request, rule by rule) and scheduling (vLLM's
scheduler and InputBatch rows step by step, timing-free) -> schedule (the contract with
``gpu_check``) -> counts_buffer and policies (what each writer and each vLLM code path does with
the pinned counts) -> cuda and simulate (SimPy streams, events and actors) -> reads (the
verdict of every read). Imports only :mod:`sim.errors` outside this package: no file I/O of
runs, no plotting, no command line.
"""
