"""Training: the one loop over any data source (loop.py), the optimizers
(optim.py), the job declaration (job.py), its dry plan (plan.py) and the job
folder's commit (outputs.py). docs/training.md explains the loop."""
