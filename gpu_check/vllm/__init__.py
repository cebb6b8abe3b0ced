"""Real vLLM on a GPU, instrumented: count the accepted-count race in vLLM itself (issue #16).

The modules split what needs vLLM and a GPU from what does not:

- ``config``: the built-in tiny Qwen3-Next model, the engine arguments and the workload (no vLLM);
- ``c_ops``: a pure-torch stand-in for vLLM's compiled ``_C_stable_libtorch`` extension;
- ``carry``: the import stubs and the set-up of a carried vLLM tree on the GPU machine;
- ``instrument``: hooks on one live ``GPUModelRunner`` that record every step (needs vLLM);
- ``run``: ``python -m gpu_check vllm-run``, one process, one LLM per mamba mode;
- ``export``: raw records -> ``schedule.json`` (sim's schema), ``observed_vllm.parquet``, timing;
- ``agreement``: what sim's policy predicts for every read, against what vLLM did;
- ``mismatch``: the landing, unseen by the instrument's polls, that reproduces a disagreement.

Only ``instrument`` and ``run`` import vLLM or need CUDA; the rest runs in CI.
"""
