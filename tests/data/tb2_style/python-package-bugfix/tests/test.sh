#!/bin/bash
# TB2-style verifier: pytest with a CTRF report, its exit status becomes the reward. Terminal-Bench 2
# runs `uvx -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf ...`; this task has no network at
# test time, so the image ships pytest and the CTRF plugin instead.
mkdir -p /logs/verifier
# The image's PYTHONPATH (/app/src, the package the agent edits) is for the agent's programs: with it
# the verifier's own python3 would import the agent's modules (a pytest.py there would run as pytest).
unset PYTHONPATH
# The agent's code runs as nobody (test_outputs.py); the expected values here stay out of its reach.
chmod 700 /tests
cd /tests
python3 -m pytest -p no:cacheprovider --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
