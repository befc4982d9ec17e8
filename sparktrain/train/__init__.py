"""Training: the loop, its records, optimizers, bench, job, plan, commit (docs/README.md)."""
