"""Training: the one loop and what it records, the optimizers, `spark bench`, the job,
its plan and the job folder's commit (docs/README.md "Where the code is")."""
