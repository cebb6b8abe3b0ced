"""specrace's GPU side: GDN spec-decode kernels, their float64 reference, and H200 checks.

Importing this package imports neither torch nor triton; `python -m gpu_check padding` needs
neither. The subpackage `gpu_check.kernels` needs torch (and triton for the kernel).

What it takes from `sim` (tests/project/test_layout.py): the model, its verdict
(`sim.model.verdict`), run directories (`sim.runs`) and the hardware comparison
(`sim.hardware`); `gpu_check.vllm` also the policy `sim.resolve` assigns a configuration. Never
`sim.explore` or `sim.cli`.
"""
