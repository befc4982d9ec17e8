"""Reproducibility around DVC: reading dvc.lock and the DVC cache, `spark repro-check`
(the check to copy into CI), and a project copy in a fresh git repo for tools and tests.
See docs/pipeline.md."""
