"""specrace: one command over both halves, ``sim`` (the model) and ``gpu_check`` (the GPU).

``specrace <command>`` runs ``python -m sim <command>``; the commands of ``python -m gpu_check``
are there too, under their own names (``replay``, ``recall``, ``calibrate``, ...) and, where a
name is taken by ``sim``, with a ``gpu-`` prefix (``specrace gpu-bench``).
"""
