"""Eval: generation from prompts, the headline of an eval, the loss plot, `spark compare`."""
