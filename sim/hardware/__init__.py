"""The model held to the hardware: agreement of ``gpu_check``'s observed tables with the model's
predictions. Reads tables only (no torch); imports :mod:`sim.model` and :mod:`sim.runs`.
"""
