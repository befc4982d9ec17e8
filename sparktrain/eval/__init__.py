"""Eval: held-out metrics, generation, the task-family data generator, the loss plot."""
