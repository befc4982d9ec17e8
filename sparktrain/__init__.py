"""Spark Train: reproducible numpy training of tiny transformer LMs.

Importing the package changes nothing in the process: the entry points call
`sparktrain.runtime.start()` first (BLAS kernel, threads, allocator). The code
map is docs/README.md.
"""
__version__ = "0.1.0"
