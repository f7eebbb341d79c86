"""A stand-in training script: reads its config file and says what it would do."""

import json
import sys

with open(sys.argv[1]) as handle:
    config = json.load(handle)
print(f"training for {config['epochs']} epochs at lr {config['lr']}")
