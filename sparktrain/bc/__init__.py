"""SPARK_BC: the bytecode of a training program (docs/sparkbc.md).

bytes --decode--> Program --encode--> bytes;  .spark source --compile--> bytes.
The opcode table is data (opcodes.py); the VM executes only the train family
plus MODEL, LET, PRINT and HALT.
"""
