"""SPARK_BC, the bytecode of a training program (docs/sparkbc.md): bytes --decode--> Program
--encode--> bytes; .spark source --compile--> bytes; the VM runs the executable subset."""
