"""The tiny transformer: config, forward/backward layer pairs, the model, the
sampling core (sample.py), weights I/O, the array backend and devices."""
