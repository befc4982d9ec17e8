"""The ground floor: errors, textout, progress, fsutil, safeload, gate, project, jobfiles
and argtypes, shared by every package and importing nothing above (docs/README.md)."""
