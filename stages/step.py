"""DVC stage step: STEP: numpy SGD, writes weights, checkpoint and ARTIFACT."""
import sys

from sparktrain.pipeline import step, main

if __name__ == "__main__":
    sys.exit(main(step, "step"))
