"""The ground floor: errors (with text out), progress, fsutil, safeload, gate, project, jobfiles
and argtypes, shared by every package and importing nothing above (docs/README.md)."""
