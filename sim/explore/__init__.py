"""Exploring the race over many runs: swarm timing draws, resumable sweeps, rate analysis,
hazard plots, the Perfetto export and benchmarks. Functions from tables to tables or figures;
imports :mod:`sim.model` and :mod:`sim.runs`, never the command line or :mod:`sim.hardware`.
"""
