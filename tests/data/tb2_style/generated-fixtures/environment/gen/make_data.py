"""Writes the task's input data at build time (relative paths, under the workdir)."""
import csv
import os
import random

rng = random.Random(7)
os.makedirs("data", exist_ok=True)
with open("data/measurements.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["sensor", "value"])
    for _ in range(200):
        w.writerow([rng.choice(["s1", "s2", "s3"]), round(rng.uniform(-5, 40), 2)])
