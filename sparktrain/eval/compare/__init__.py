"""`spark compare`: `runs` reads, picks and labels the experiments and prints
them; eval/plot.py draws them. See docs/pipeline.md ("Sweep and compare")."""
