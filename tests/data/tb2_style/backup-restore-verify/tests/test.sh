#!/bin/bash
# TB2-style verifier: pytest with a CTRF report, its exit status becomes the reward. Terminal-Bench 2
# runs `uvx -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf ...`; this task has no network at
# test time, so the image ships pytest and the CTRF plugin instead.
mkdir -p /logs/verifier
cd /tests
python3 -m pytest -p no:cacheprovider --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
