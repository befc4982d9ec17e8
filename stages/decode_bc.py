"""DVC stage decode-bc: decode the program and resolve the TRAIN of params.job."""
import sys

from sparktrain.pipeline import decode_bc, main

if __name__ == "__main__":
    sys.exit(main(decode_bc, "decode-bc"))
