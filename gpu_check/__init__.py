"""specrace's GPU side: GDN spec-decode kernels, their float64 reference, and H200 checks.

Importing this package imports neither torch nor triton; `python -m gpu_check padding` needs
neither. The subpackage `gpu_check.kernels` needs torch (and triton for the kernel).
"""
