"""Sweeps of `dvc exp run` over a grid of params, run on a Dask cluster."""
