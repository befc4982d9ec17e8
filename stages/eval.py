"""DVC stage eval: held-out metrics (eval.json) and the loss picture."""
import sys

from sparktrain.pipeline import evaluate, main

if __name__ == "__main__":
    sys.exit(main(evaluate, "eval"))
