"""The tiny transformer: config, forward/backward layer pairs, the model kinds and the
sampling core (build.py), weights I/O, the array backend and devices."""
