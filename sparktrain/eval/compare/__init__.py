"""`spark compare`: the picture and the table of a sweep, read through DVC's API.

Three modules, one idea each: `runs` reads the experiments (through the one
reader of experiments, sparktrain/repro/experiments.py), picks them and labels
them; `table` prints them; `plot` draws them. See docs/pipeline.md ("Sweep and
compare").
"""
