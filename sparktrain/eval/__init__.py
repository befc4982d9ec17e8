"""Eval: generation from prompts, the headline of an eval, the loss plot, `spark compare` and
the reader of DVC experiments it shares with `spark sweep`."""
