"""Reproducibility around DVC: dvc.lock and the DVC cache at stage time (dvclock.py), a stage
stopped by a signal (signals.py), tools run as subprocesses and project copies (toolenv.py),
`spark repro-check`, the check to copy into CI (check.py). See docs/pipeline.md."""
