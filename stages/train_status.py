"""DVC stage train-status: TRAIN's dry accept: validate the job and write its plan."""
import sys

from sparktrain.pipeline import train_status, main

if __name__ == "__main__":
    sys.exit(main(train_status, "train-status"))
