"""The ground floor: what every other package shares, importing nothing above it.

errors (SparkError and friends), textout (printable text), progress (the bar),
fsutil (atomic writes, bounded reads), safeload (the bounded JSON/YAML loader),
gate (the one check before every write), project (the project root), jobfiles
(the job folder's file names) and argtypes (count values from flags and the
environment). See docs/README.md for the whole map.
"""
