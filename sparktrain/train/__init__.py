"""Training: the one loop over any data source (loop.py), one attempt at a STEP
(attempt.py), the optimizers and the clipped update (optim.py), the timing of
the loop core (bench.py), the job declaration (job.py), its dry plan (plan.py)
and the job folder's commit (outputs.py). docs/training.md explains the loop."""
