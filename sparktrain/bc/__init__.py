"""SPARK_BC, the bytecode of a training program (docs/sparkbc.md): bytes --decode--> Program
--encode--> bytes (codec.py, with the dump and the VM, which runs the executable subset);
.spark source --compile--> bytes (compiler.py); the format as data (program.py)."""
