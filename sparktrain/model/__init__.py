"""The tiny transformer: config, forward/backward layer pairs, the model, weights I/O."""
