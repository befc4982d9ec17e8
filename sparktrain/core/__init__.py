"""The ground floor: errors (and terminal text), what a number is (values), progress, fsutil,
safeload, gate, jobfiles (project root, job folders), compat; shared by all, importing
nothing above (docs/README.md)."""
